import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// HTTP for tests, kept off Swift's cooperative thread pool.
///
/// On Linux, `URLSession.data(for:)` starts its task with a `DispatchQueue.sync` on the session's queue (and a
/// look into `URLCache`), blocking the calling thread while other tests' requests go first; with two cores the
/// cooperative pool has two threads, and a stack sample of a parallel run caught both of them waiting there.
/// Here the task is started from a thread of its own, and no cache is consulted.
public enum TestHTTP {
    private static let session: URLSession = {
        let configuration = URLSessionConfiguration.default
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        return URLSession(configuration: configuration)
    }()

    public static func data(for request: URLRequest) async throws -> (Data, URLResponse) {
        try await withCheckedThrowingContinuation { continuation in
            Thread {
                session.dataTask(with: request) { data, response, error in
                    if let response {
                        continuation.resume(returning: (data ?? Data(), response))
                    } else {
                        continuation.resume(throwing: error ?? URLError(.badServerResponse))
                    }
                }.resume()
            }.start()
        }
    }
}
