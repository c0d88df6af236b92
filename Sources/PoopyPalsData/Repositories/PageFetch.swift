/// How many rows a page query asks for, written into its SQL as a literal `LIMIT`.
///
/// With `LIMIT $n` PostgreSQL cannot cost a prepared statement's generic plan (it assumes a tenth of the rows
/// come back), so once a device has a few hundred logs it judges the generic plan dearer than a custom one and
/// plans the statement again on every execution: "list 20 newest" at 1 M rows ran at 5 300 transactions/s with
/// `LIMIT $1` against 6 900 with `LIMIT 21` (pgbench, same SQL, concurrency 8). A literal lets it keep one
/// plan; rounding up to a few fixed sizes keeps the statements per query shape at six, so the statement cache
/// cannot be churned by clients asking for every size from 1 to 500. The caller trims the extra rows.
enum PageFetch {
    static let sizes = [11, 21, 51, 101, 201, 501]

    /// The smallest fixed size of at least `rows` (callers validate `rows`; anything larger is used as is).
    static func rows(atLeast rows: Int) -> Int {
        sizes.first { $0 >= rows } ?? rows
    }
}
