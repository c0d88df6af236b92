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

    static func data(for request: URLRequest) async throws -> (Data, URLResponse) {
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

    /// One request: `json` is sent as `application/json`, `body` as it is; the reply whatever its status.
    public static func send(_ method: String, _ url: URL, headers: [String: String] = [:], json: String? = nil, body: Data? = nil,
                            timeout: TimeInterval = 15) async throws -> HTTPReply {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.timeoutInterval = timeout
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        if let json {
            request.httpBody = Data(json.utf8)
            request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        } else if let body {
            request.httpBody = body
        }
        let started = ContinuousClock.now
        let data: Data, response: URLResponse
        do {
            (data, response) = try await Self.data(for: request)
        } catch let error as URLError {
            // Which request, and after how long: a bare "NSURLErrorDomain Code=-1001" (CI of 1a04b8f) names neither.
            throw RequestFailed(method: method, path: url.path, error: error, after: ContinuousClock.now - started, timeout: timeout)
        }
        guard let http = response as? HTTPURLResponse else { throw URLError(.badServerResponse) }
        var fields: [String: String] = [:]
        for (name, value) in http.allHeaderFields { fields["\(name)"] = "\(value)" }
        return HTTPReply(status: http.statusCode, headers: fields, body: data)
    }
}

/// A test request that got no reply: the request's method and path (never its headers, which carry device ids),
/// the error, and how long it had waited.
public struct RequestFailed: Error, CustomStringConvertible {
    public let method: String
    public let path: String
    public let error: URLError
    public let after: Duration
    public let timeout: TimeInterval
    public var description: String {
        "\(method) \(path): no reply (URLError \(error.code.rawValue)) after \(after), timeout \(Int(timeout)) s"
    }
}

/// What a test request got back.
public struct HTTPReply: Sendable {
    public let status: Int
    public let headers: [String: String]
    public let body: Data
    public var json: [String: Any]? { try? JSONSerialization.jsonObject(with: body) as? [String: Any] }
    /// `error.code` of an API error body.
    public var errorCode: String? { (json?["error"] as? [String: Any])?["code"] as? String }
    public var text: String { String(decoding: body, as: UTF8.self) }
    public func header(_ name: String) -> String? { headers.first { $0.key.lowercased() == name.lowercased() }?.value }
}
