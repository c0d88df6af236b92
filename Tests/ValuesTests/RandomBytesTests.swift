import Foundation
import Testing
@testable import Values

/// `RandomBytes` hands each of the kernel's bytes out once, across batch boundaries, and never the zeros it
/// overwrites a batch with.
@Suite("Random bytes")
struct RandomBytesTests {
    @Test func idsAcrossManyBatchesAreDistinctVersionFourUUIDs() {
        var seen = Set<UUID>()
        let count = 20 * RandomBytes.batch / 16  // 20 batches
        for _ in 0..<count {
            let id = UUIDText.random()
            let bytes = withUnsafeBytes(of: id.uuid) { Array($0) }
            #expect(bytes[6] >> 4 == 4)
            #expect(bytes[8] >> 6 == 2)
            seen.insert(id)
        }
        #expect(seen.count == count)
    }

    /// Odd sizes straddle the batch's end; the largest is over a batch (the generator's path). A byte value
    /// appears about 1/256 of the time: zeros (the overwritten part of a batch) would show at once.
    @Test func fillsOfEverySizeLookUniform() {
        var counts = [Int](repeating: 0, count: 256)
        var total = 0
        for size in [1, 7, 16, 100, 1000, 4095, RandomBytes.batch, RandomBytes.batch + 1, 3 * RandomBytes.batch] {
            for _ in 0..<8 {
                var out = [UInt8](repeating: 0, count: size)
                out.withUnsafeMutableBytes { RandomBytes.shared.fill($0) }
                for byte in out { counts[Int(byte)] += 1 }
                total += size
            }
        }
        let expected = Double(total) / 256
        #expect(Double(counts[0]) < expected * 1.5, "zeros: \(counts[0]) of \(total)")
        #expect(counts.allSatisfy { Double($0) > expected * 0.5 && Double($0) < expected * 1.5 })
    }
}
