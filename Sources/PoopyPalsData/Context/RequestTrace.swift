/// The request a piece of data-layer work runs for, so that its log lines can be tied to the HTTP request
/// without passing a logger through every call. Set by the HTTP layer around each request.
public enum RequestTrace {
    @TaskLocal public static var id: String?
    /// Where the request's writes record their commit positions (set by the HTTP layer when reads may go to a
    /// standby, so that the response can carry a `Consistency-Token`).
    @TaskLocal public static var commits: CommitRecorder?
}
