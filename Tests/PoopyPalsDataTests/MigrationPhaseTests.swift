import Foundation
import PoopyPalsData
import PostgresClient
import Testing
import TestSupport
import Values

/// Migrations in two phases (issue 55): `sql/post/` waits for `migrate --post-deployment`.
@Suite("Migration phases")
struct MigrationPhaseTests {
    /// A migrations folder: `pre` at its top, `post` in its post/ folder.
    static func folder(pre: [String: String], post: [String: String]) throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("poopypals-phases-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: root.appendingPathComponent("post"), withIntermediateDirectories: true)
        for (name, sql) in pre { try sql.write(to: root.appendingPathComponent(name), atomically: true, encoding: .utf8) }
        for (name, sql) in post { try sql.write(to: root.appendingPathComponent("post").appendingPathComponent(name), atomically: true, encoding: .utf8) }
        return root
    }

    static var postDeployment: Migrator.Options {
        var options = Migrator.Options()
        options.postDeployment = true
        return options
    }

    @Test func theLoaderReadsBothFoldersInOneSequence() throws {
        let root = try Self.folder(pre: ["0001_a.sql": "SELECT 1", "0003_c.sql": "SELECT 3"], post: ["0002_b.sql": "SELECT 2"])
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try MigrationFile.load(directory: root)
        #expect(files.map(\.version) == [1, 2, 3])
        #expect(files.map(\.phase) == [.preDeployment, .postDeployment, .preDeployment])
        // One version in both folders is refused.
        try "SELECT 1".write(to: root.appendingPathComponent("post/0001_again.sql"), atomically: true, encoding: .utf8)
        #expect(throws: MigrationError.self) { try MigrationFile.load(directory: root) }
    }

    @Test func migrateAppliesPreDeploymentFilesOnlyAndPostDeploymentWhenAsked() async throws {
        let root = try Self.folder(
            pre: ["0001_t.sql": "CREATE TABLE t (old int, new int)", "0003_more.sql": "CREATE TABLE u (v int)"],
            post: ["0002_drop_old.sql": "ALTER TABLE t DROP COLUMN old"])
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try MigrationFile.load(directory: root)
        try await TestDatabase.with { db in
            let pre = try await db.withConnection { try Migrator(files: files).migrate(on: $0).map(\.file.version) }
            #expect(pre == [1, 3])
            let columns = { try await db.withConnection { try $0.query("SELECT count(*) FROM pg_attribute WHERE attrelid = 't'::regclass AND attnum > 0 AND NOT attisdropped")[0].decode(0, as: Int.self) } }
            #expect(try await columns() == 2)
            let status = try await db.withConnection { try Migrator(files: files).status(on: $0) }
            #expect(!status.isUpToDate)
            #expect(status.preDeploymentDone)
            #expect(status.pendingPostDeployment.map(\.version) == [2])
            #expect(status.entries.map(\.phase) == [.preDeployment, .postDeployment, .preDeployment])
            // Applied after 0003: not refused as out of order (each phase is in order by itself).
            let post = try await db.withConnection { try Migrator(files: files, options: Self.postDeployment).migrate(on: $0).map(\.file.version) }
            #expect(post == [2])
            #expect(try await columns() == 1)
            #expect(try await db.withConnection { try Migrator(files: files).status(on: $0) }.isUpToDate)
        }
    }

    /// In version order, as a database upgraded release by release with each post-deployment step on time met them:
    /// a fresh database gets the same schema.
    @Test func postDeploymentAppliesEverythingPendingInVersionOrder() async throws {
        let root = try Self.folder(pre: ["0001_t.sql": "CREATE TABLE t (v int)", "0004_later.sql": "ALTER TABLE t ADD COLUMN w int"],
                                   post: ["0002_p.sql": "ALTER TABLE t ADD COLUMN p int"])
        defer { try? FileManager.default.removeItem(at: root) }
        let files = try MigrationFile.load(directory: root)
        try await TestDatabase.with { db in
            let applied = try await db.withConnection { try Migrator(files: files, options: Self.postDeployment).migrate(on: $0).map(\.file.version) }
            #expect(applied == [1, 2, 4])
        }
    }

    @Test func statusAndDryRunShowEachFilesPhase() async throws {
        let root = try Self.folder(pre: ["0001_t.sql": "CREATE TABLE t (v int)"], post: ["0002_p.sql": "ALTER TABLE t ADD COLUMN p int"])
        defer { try? FileManager.default.removeItem(at: root) }
        try await TestDatabase.with { db in
            let url = db.url
            let sql = ["--migrations-dir", root.path, "--database-url", url]
            let up = try await TestProject.run(["migrate"] + sql)
            #expect(up.status == 0, "\(up.stderr)")
            #expect(up.stdout.contains("1 post-deployment migration waits (0002)"), "\(up.stdout)")
            let status = try await TestProject.run(["migrate", "status"] + sql)
            #expect(status.status == 1)
            let lines = status.stdout.split(separator: "\n").map(String.init)
            #expect(lines.first?.hasSuffix("PHASE") == true, "\(status.stdout)")
            #expect(lines.contains { $0.contains("0001") && $0.contains("applied") && $0.hasSuffix("pre-deployment") })
            #expect(lines.contains { $0.contains("0002") && $0.contains("pending") && $0.hasSuffix("post-deployment") })
            let json = try await TestProject.run(["migrate", "status", "--json"] + sql)
            let document = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
            #expect(document?["preDeploymentDone"] as? Bool == true)
            #expect((document?["migrations"] as? [[String: Any]])?.map { $0["phase"] as? String } == ["pre-deployment", "post-deployment"])
            let dryRun = try await TestProject.run(["migrate", "--post-deployment", "--dry-run"] + sql)
            #expect(dryRun.stdout.contains("-- >>> post/0002_p.sql (post-deployment"), "\(dryRun.stdout)")
            let post = try await TestProject.run(["migrate", "--post-deployment"] + sql)
            #expect(post.status == 0, "\(post.stderr)")
            #expect(try await TestProject.run(["migrate", "status"] + sql).status == 0)
        }
    }

    /// A rollback's instances run the previous release, whose `migrate` (Compose runs it before `serve`) meets the
    /// later release's files: left as they are, not refused as missing; a file deleted from a release still is.
    @Test func aLaterReleasesFilesAreNotMissingButADeletedFileIs() async throws {
        let both = try MigratorTests.files(["0001_a.sql": "CREATE TABLE a (id int);", "0002_b.sql": "CREATE TABLE b (id int);"])
        var later = Migrator.Options()
        later.release = SemanticVersion(9, 0, 0)
        var current = Migrator.Options()
        current.release = SemanticVersion(8, 0, 0)
        let (laterOptions, currentOptions) = (later, current)
        try await TestDatabase.with { db in
            try await MigratorTests.migrate(db, [both[0]], currentOptions)
            try await MigratorTests.migrate(db, both, laterOptions)
            let status = try await db.withConnection { try Migrator(files: [both[0]], options: currentOptions).status(on: $0) }
            #expect(status.entries.map(\.state) == [.applied, .newer])
            #expect(status.isUpToDate)
            #expect(try await MigratorTests.migrate(db, [both[0]], currentOptions).isEmpty)
            let recorded = try await db.withConnection { try $0.query("SELECT release FROM schema_migrations ORDER BY version").map { try $0.decode(0, as: String.self) } }
            #expect(recorded == ["8.0.0", "9.0.0"])
        }
        try await TestDatabase.with { db in
            try await MigratorTests.migrate(db, both, currentOptions)
            let refused = await #expect(throws: MigrationError.self) { try await MigratorTests.migrate(db, [both[0]], currentOptions) }
            #expect(refused.map { "\($0)" }?.contains("version 2 (b) is recorded as applied but its file is missing") == true)
        }
    }
}
