/// The most bytes one page of logs or changes may take in a response, whatever its `limit`: with notes of 2 000
/// characters a page of 500 changes was 4 MiB (12 with control characters escaped), built whole in memory for each
/// request, so that clients that asked and never read grew the process by that much each. Honest pages (short or
/// no notes) are far below it and keep their full `limit`.
public enum PageBytes {
    public static let budget = 512 * 1024

    /// How many items, from the first, of these response sizes (`PoopLog.responseSizeBound`) fit in `budget`; at
    /// least one, so that a page always moves on.
    static func countFitting(_ sizes: some Sequence<Int>) -> Int {
        var total = 0
        var count = 0
        for size in sizes {
            total += size
            if count > 0 && total > budget { break }
            count += 1
        }
        return count
    }
}
