import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An export's bytes, written while its database transaction reads them and read back once it has committed, so
/// that no database connection waits on the client's pace: up to `memoryLimit` in memory, the rest in a temporary
/// file that is unlinked at once (nothing is left on disk if the process dies) and closed with the spool.
///
/// Streaming straight from the transaction held a pooled connection, in an open `REPEATABLE READ` transaction,
/// for as long as the client took to read: a dozen clients that never read took every connection of the pool.
///
/// Used by one task at a time (written by the export's transaction, then read by its response): not shared.
final class ExportSpool: @unchecked Sendable {
    enum Failure: Error { case cannotSpool(Int32) }

    private let memoryLimit: Int
    private var memory: [UInt8] = []
    private var file: Int32 = -1
    private var readOffset = 0
    /// Bytes written in all.
    private(set) var count = 0
    /// True once every byte written has been read.
    var isRead: Bool { readOffset >= count }

    init(memoryLimit: Int = 1 << 20) {
        self.memoryLimit = max(0, memoryLimit)
    }

    deinit {
        if file >= 0 { Glibc.close(file) }
    }

    /// Appends `bytes`, to the file once memory would exceed its limit.
    /// - Throws: `Failure.cannotSpool` with `errno` when the temporary file cannot be made or written (a full disk).
    func append(_ bytes: [UInt8]) throws {
        count += bytes.count
        if file < 0 && memory.count + bytes.count <= memoryLimit {
            memory.append(contentsOf: bytes)
            return
        }
        if file < 0 {
            file = try Self.temporaryFile()
            try write(memory)
            memory = []
        }
        try write(bytes)
    }

    /// The next at most `maximum` bytes, in order; nil at the end.
    /// - Throws: `Failure.cannotSpool` when the file cannot be read.
    func read(upTo maximum: Int) throws -> [UInt8]? {
        if file < 0 {
            guard readOffset < memory.count else { return nil }
            let end = min(memory.count, readOffset + maximum)
            defer { readOffset = end }
            return Array(memory[readOffset..<end])
        }
        var chunk = [UInt8](repeating: 0, count: maximum)
        let got = chunk.withUnsafeMutableBytes { pread(file, $0.baseAddress, maximum, off_t(readOffset)) }
        guard got >= 0 else { throw Failure.cannotSpool(errno) }
        guard got > 0 else { return nil }
        readOffset += got
        chunk.removeLast(maximum - got)
        return chunk
    }

    private func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let wrote = bytes.withUnsafeBytes { Glibc.write(file, $0.baseAddress! + offset, bytes.count - offset) }
            if wrote < 0 && errno == EINTR { continue }
            guard wrote > 0 else { throw Failure.cannotSpool(errno) }
            offset += wrote
        }
    }

    /// A new file in `TMPDIR` (else /tmp), readable by this process only, already unlinked.
    private static func temporaryFile() throws -> Int32 {
        let folder = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array((folder + "/poopypals-export-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { throw Failure.cannotSpool(errno) }
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        return fd
    }
}
