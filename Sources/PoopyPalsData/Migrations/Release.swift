import Foundation
import Values

/// What this build is, kept in one place: its release (semantic versioning) and the schema it works with. Tests hold
/// `version` equal to openapi.yaml's `info.version` and CHANGELOG.md's newest release, and `requiredMigration` /
/// `newestPostDeploymentMigration` equal to the newest files of `sql/` and `sql/post/`.
///
/// Releases and schemas (README "Upgrading"): a release's pre-deployment migrations keep `previous` serving, so old
/// and new instances run side by side during a rolling upgrade and a rollback needs no restore; its post-deployment
/// migrations (`migrate --post-deployment`, once every instance runs it) may remove what `previous` used, and then
/// raise the database's oldest supported release (`poopypals_oldest_release()`, sql/0036).
public enum Release {
    /// This release.
    public static let version = SemanticVersion(1, 1, 0)
    /// The release before it: it keeps serving on a database this release's pre-deployment migrations changed, and
    /// can take the instances back (a rollback) until the post-deployment migrations run. `make test` proves it with
    /// that release's own binary (scripts/upgrade_drill.py).
    public static let previous = SemanticVersion(1, 0, 0)
    /// The newest pre-deployment migration this release needs applied before it serves.
    public static let requiredMigration: Int64 = 42
    /// The newest post-deployment migration this release ships; nil when it ships none. It serves both before and
    /// after them.
    public static let newestPostDeploymentMigration: Int64? = nil

    /// `poopypals --version`.
    public static var description: String {
        let post = newestPostDeploymentMigration.map { String(format: "up to %04lld, optional: it serves before and after them", $0) } ?? "none"
        return """
            poopypals \(version)
            schema: pre-deployment migrations up to \(String(format: "%04lld", requiredMigration)) required; \
            post-deployment migrations: \(post)
            serves beside release \(previous) during a rolling upgrade (and hands back to it in a rollback) until \
            `poopypals migrate --post-deployment` runs
            """
    }
}
