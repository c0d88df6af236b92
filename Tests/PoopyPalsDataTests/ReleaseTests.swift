import Foundation
@testable import PoopyPalsData
import TestSupport
import Testing
import Values

/// What a release is, kept in one place (`Release`) and said the same everywhere (issue 55).
@Suite("Releases") struct ReleaseTests {
    static func changelogHeadings() throws -> [(version: String, line: String)] {
        let text = try String(contentsOf: TestProject.root.appendingPathComponent("CHANGELOG.md"), encoding: .utf8)
        return text.split(separator: "\n").filter { $0.hasPrefix("## [") }.compactMap { line in
            guard let close = line.firstIndex(of: "]") else { return nil }
            return (String(line[line.index(line.startIndex, offsetBy: 4)..<close]), String(line))
        }
    }

    @Test func theChangelogNamesThisReleaseFirstAndThePreviousOneWithItsCommit() throws {
        let headings = try Self.changelogHeadings()
        try #require(headings.count >= 2)
        #expect(headings[0].version == Release.version.description)
        #expect(headings[1].version == Release.previous.description)
        // The previous release is built from its commit by make test (scripts/release.sh previous).
        #expect(headings[1].line.range(of: "commit [0-9a-f]{40}", options: .regularExpression) != nil, "\(headings[1].line)")
        #expect(headings.map(\.version).compactMap(SemanticVersion.init).count == headings.count)
        #expect(Set(headings.map(\.version)).count == headings.count)
    }

    @Test func theRequiredMigrationIsTheNewestFileOfEachPhase() throws {
        let files = try MigrationFile.load(directory: TestProject.migrationsDirectory)
        #expect(files.filter { $0.phase == .preDeployment }.map(\.version).max() == Release.requiredMigration)
        #expect(files.filter { $0.phase == .postDeployment }.map(\.version).max() == Release.newestPostDeploymentMigration)
    }

    @Test func versionPrintsTheReleaseTheSchemaAndThePreviousRelease() async throws {
        let output = try await TestProject.run(["--version"])
        #expect(output.status == 0)
        let lines = output.stdout.split(separator: "\n")
        #expect(lines.first == "poopypals \(Release.version)")
        #expect(output.stdout.contains(String(format: "%04lld", Release.requiredMigration)))
        #expect(output.stdout.contains("beside release \(Release.previous)"))
    }

    @Test func theDockerImageIsLabelledWithThisRelease() throws {
        let dockerfile = try String(contentsOf: TestProject.root.appendingPathComponent("Dockerfile"), encoding: .utf8)
        #expect(dockerfile.contains("ARG POOPYPALS_VERSION=\(Release.version)\n"))
        #expect(dockerfile.contains("org.opencontainers.image.version=\"${POOPYPALS_VERSION}\""))
    }

    @Test func semanticVersionsParseStrictlyAndCompareByField() {
        #expect(SemanticVersion("1.10.0")! > SemanticVersion("1.9.3")!)
        #expect(SemanticVersion("2.0.0")! > SemanticVersion("1.99.99")!)
        #expect(SemanticVersion("1.0.0") == SemanticVersion(1, 0, 0))
        for bad in ["", "1", "1.0", "1.0.0.0", "01.0.0", "1.0.-1", "1.0.0-rc1", " 1.0.0", "1..0", "1.0.1234567", "v1.0.0"] {
            #expect(SemanticVersion(bad) == nil, "\(bad)")
        }
    }
}
