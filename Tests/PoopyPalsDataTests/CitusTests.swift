import Testing

/// What a real Citus cluster (scripts/citus.sh: a coordinator and two workers) does with the mechanisms our schema
/// and request context rest on: the facts docs/scaling.md's plan assumed, each checked here (issue 45). They hold
/// or fail on Citus itself, so a Citus upgrade that changes one fails here first. Each test works in a schema of its
/// own on the coordinator, as the app's non-superuser owner (`POOPYPALS_TEST_CITUS_URL`, from `scripts/citus.sh url`).
@Suite("Citus: what the cluster carries to its workers", .serialized, .enabled(if: CitusCluster.url != nil, "needs POOPYPALS_TEST_CITUS_URL (scripts/citus.sh url)"))
struct CitusTests {}  // The tests: CitusTests+*.swift; helpers: CitusCluster.swift.
