package import Foundation
package import HeraldStack
package import HeraldTestSupport
package import NIOCore
package import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Runs blocking socket reads on a thread of their own, never on the cooperative pool (see
/// ``runProgram(_:_:input:environment:)``).
package func offPool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: body()) }.start()
    }
}

/// A plain TCP connection for what an HTTP client library will not send: partial requests,
/// half-closes, malformed heads.
package final class RawConnection: @unchecked Sendable {
    package let fd: Int32

    /// `source`: the local address to connect from (any of 127.0.0.0/8 reaches the edge on
    /// loopback), so that a test can be two clients.
    package init(url: String, source: String? = nil) throws {
        let address = try #require(URL(string: url.trimmingCharacters(in: .whitespacesAndNewlines)))
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard bound == 0 else { throw StackError(description: "bind \(source) failed: errno \(errno)") }
        }
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = in_port_t(UInt16(try #require(address.port)).bigEndian)
        sin.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &sin) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else { throw StackError(description: "connect failed: errno \(errno)") }
    }

    deinit { close(fd) }

    package func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw StackError(description: "send failed: errno \(errno)") }
            sent += n
        }
    }

    package func shutdownWrite() { _ = shutdown(fd, Int32(SHUT_WR)) }

    /// Whether the peer has closed (a read would return end of file or an error), without waiting.
    package func isClosed() -> Bool {
        var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&poller, 1, 0) > 0 else { return false }
        var byte: UInt8 = 0
        return recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) <= 0
    }

    /// Everything the peer sends until it closes, or until `timeout` (then what came so far);
    /// `closed` says which.
    package func read(timeout: Duration) -> (text: String, closed: Bool) {
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = deadline - ContinuousClock.now
            guard
                poll(
                    &poller, 1,
                    Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
                    > 0
            else {
                continue
            }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { return (String(decoding: received, as: UTF8.self), true) }
            received += buffer[0..<n]
        }
        return (String(decoding: received, as: UTF8.self), false)
    }

    /// One whole answer on a connection that stays open: its head, then `Content-Length` bytes of
    /// body (an answer without one ends with its head). What came so far at `timeout`.
    package func readResponse(timeout: Duration) -> String {
        let deadline = ContinuousClock.now + timeout
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while ContinuousClock.now < deadline {
            let text = String(decoding: received, as: UTF8.self)
            if let end = text.range(of: "\r\n\r\n") {
                let head = text[..<end.lowerBound].lowercased()
                let length =
                    head.split(separator: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.count - text[..<end.upperBound].utf8.count >= length { return text }
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&poller, 1, 100) > 0 else { continue }
            let n = recv(fd, &buffer, buffer.count, 0)
            if n <= 0 { break }
            received += buffer[0..<n]
        }
        return String(decoding: received, as: UTF8.self)
    }

    /// What the peer sent before closing; fails the test when it has not closed by `timeout`. The
    /// wait is on a thread of its own, never on the cooperative pool.
    package func readUntilClosed(timeout: Duration, sourceLocation: SourceLocation = #_sourceLocation) async -> String {
        await offPool { self.blockingReadUntilClosed(timeout: timeout, sourceLocation: sourceLocation) }
    }

    /// ``readUntilClosed(timeout:sourceLocation:)`` on the calling thread, which it blocks: for a
    /// thread of the test's own.
    package func blockingReadUntilClosed(timeout: Duration, sourceLocation: SourceLocation = #_sourceLocation)
        -> String
    {
        let answer = read(timeout: timeout)
        #expect(answer.closed, "the connection is still open after \(timeout)", sourceLocation: sourceLocation)
        return answer.text
    }
}

/// Sends `request` on a new connection (from the local address `source`, if given) and returns
/// everything the server answers until it closes, on a thread of its own. A server may answer and
/// close before the whole request is sent (a body it refuses early): what could not be sent is
/// dropped and the answer still read, where AsyncHTTPClient traps ("Waiting for response data must
/// start after request head was sent").
package func rawExchange(_ url: String, _ request: String, from source: String? = nil) async throws -> String {
    try await withCheckedThrowingContinuation { continuation in
        Thread {
            continuation.resume(
                with: Result {
                    let connection = try RawConnection(url: url, source: source)
                    try? connection.send(request)
                    return connection.blockingReadUntilClosed(timeout: .seconds(30))
                })
        }.start()
    }
}
