import Foundation

extension Date {
    /// Microseconds from 0001-01-01T00:00:00Z through 9999-12-31T23:59:59.999999Z: what this library encodes
    /// and decodes. Every conversion checks against it, so no input can trap a conversion.
    public static let representableMicroseconds: ClosedRange<Int64> = -62_135_596_800_000_000 ... 253_402_300_799_999_999

    /// Microseconds since 1970 rounded to PostgreSQL's resolution, or nil outside years 1…9999 (or for NaN).
    public var microsecondsSince1970: Int64? {
        let micros = (timeIntervalSince1970 * 1_000_000).rounded()
        // Both bounds are exact in a Double (multiples of 2^8), so these comparisons are exact too; NaN fails them.
        guard micros >= -62_135_596_800_000_000.0, micros < 253_402_300_800_000_000.0 else { return nil }
        return Int64(micros)
    }

    /// The date `micros` microseconds after 1970, or nil outside years 1…9999.
    public init?(microsecondsSince1970 micros: Int64) {
        guard Self.representableMicroseconds.contains(micros) else { return nil }
        self.init(timeIntervalSince1970: Double(micros) / 1_000_000)
    }
}
