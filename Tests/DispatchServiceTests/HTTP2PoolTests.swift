import Foundation
import NIOCore
import NIOHPACK
import Testing

@testable import DispatchService

#if canImport(Glibc)
    import Glibc
#endif

@Suite("HTTP/2 pool")
struct HTTP2PoolTests {
    /// A loopback port nothing listens on: bound, then closed.
    static func closedPort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        try #require(bound)
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @Test("a push service that refuses connections: every request fails as ConnectionError, and nothing traps")
    func refusedConnection() async throws {
        // Each refused connection is torn down without ever being active; its readiness promise
        // once stayed pending, which NIO traps on in debug builds (dispatch died by SIGILL).
        let pool = try HTTP2Pool(url: "http://127.0.0.1:\(try Self.closedPort())", tls: nil, connections: 2, connectTimeout: .seconds(2))
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":path", value: "/3/device/x")
        for _ in 0..<10 {
            let answers = await pool.send([HTTP2Request(headers: headers, body: ByteBuffer())], timeout: .seconds(2))
            #expect(answers.count == 1)
            guard case .failed = answers.first else {
                Issue.record("a refused connection answered \(String(describing: answers.first))")
                continue
            }
        }
    }
}
