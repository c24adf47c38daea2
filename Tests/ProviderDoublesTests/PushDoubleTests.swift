import AsyncHTTPClient
import Foundation
import HeraldTestSupport
import NIOCore
import NIOHTTP1
import NIOSSL
import ProviderDoubles
import Synchronization
import Testing

/// The push double every provider test and herald-bench's APNs double run on, seen from a client
/// nobody here wrote (async-http-client): what it records, how and when it answers, over which
/// protocol. (Plain HTTP/2 with prior knowledge, and the streams a client resets, are
/// PushProvidersTests' HTTP2PoolTests, over the sender's own pool.)
@Suite("the push double", .watchedForStalls)
struct PushDoubleTests {
    /// A client that trusts the test CA; with `identity`, presenting that CA's client certificate.
    static func client(_ made: APNsTestCertificates, identity: Bool = false) throws -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(made.ca)
        if identity {
            tls.certificateChain = try NIOSSLCertificate.fromPEMBytes(made.pem).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: made.pem, format: .pem))
        }
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
    }

    static func post(
        _ client: HTTPClient, _ url: String, headers: [(String, String)] = [], body: String = "",
        timeout: TimeAmount = .seconds(20)
    ) async throws -> (status: Int, headers: [(String, String)], body: String, version: HTTPVersion) {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: body))
        let response = try await client.execute(request, timeout: timeout)
        let bytes = try await response.body.collect(upTo: 1 << 20)
        return (
            Int(response.status.code), response.headers.map { ($0.name.lowercased(), $0.value) },
            String(buffer: bytes), response.version
        )
    }

    /// Runs `body` with a client and a double over a CA's certificate for 127.0.0.1 made for it
    /// (with a client certificate of the same CA), stopping both and removing the certificates
    /// however it ends.
    static func with(
        _ transport: @escaping (APNsTestCertificates) -> PushDouble.Transport, record: Bool = true,
        identity: Bool = false,
        respond: @escaping @Sendable (PushDouble.Request, PushDouble.Responder) -> Void,
        _ body: (HTTPClient, PushDouble) async throws -> Void
    ) async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("double-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        let made = try await APNsTestCertificates.make(in: folder)
        let double = try await PushDouble.start(transport(made), record: record, respond: respond)
        let client = try client(made, identity: identity)
        do {
            try await body(client, double)
        } catch {
            try? await client.shutdown()
            await double.stop()
            throw error
        }
        try await client.shutdown()
        await double.stop()
    }

    static func h2(_ made: APNsTestCertificates) -> PushDouble.Transport {
        .tls(certificate: made.serverCertificate, key: made.serverKey)
    }

    @Test(
        "over HTTP/2: a request recorded as sent (method, path, lower-case headers, :authority as host, body) and answered as replied"
    )
    func recordsAndAnswers() async throws {
        try await Self.with(Self.h2) { request, responder in
            responder.send(
                .init(
                    status: 410, headers: [("apns-id", "A-1"), ("Retry-After", "7")],
                    body: Array(#"{"reason":"Unregistered"}"#.utf8)))
        } _: { client, double in
            let answer = try await Self.post(
                client, double.url + "/3/device/abc", headers: [("apns-topic", "com.example"), ("X-Mixed", "Case")],
                body: #"{"aps":{}}"#)
            #expect(answer.version == .http2)
            #expect(answer.status == 410)
            #expect(answer.body == #"{"reason":"Unregistered"}"#)
            #expect(answer.headers.contains { $0 == ("apns-id", "A-1") })
            #expect(answer.headers.contains { $0 == ("retry-after", "7") })
            #expect(answer.headers.contains { $0 == ("content-length", "25") })
            let seen = try #require(double.requests.first)
            #expect(double.requests.count == 1)
            #expect(seen.method == "POST" && seen.path == "/3/device/abc")
            #expect(seen.header("apns-topic") == "com.example" && seen.header("x-mixed") == "Case")
            #expect(seen.header("host") == "127.0.0.1:\(double.port)")
            #expect(!seen.headers.contains { $0.0.hasPrefix(":") })
            #expect(String(decoding: seen.body, as: UTF8.self) == #"{"aps":{}}"#)
            #expect(seen.connection == 1 && double.connections == 1)
        }
    }

    @Test("a body larger than the connection's first window arrives whole, and several streams share one connection")
    func largeBodiesAndStreams() async throws {
        let large = String(repeating: "x", count: 200_000)
        try await Self.with(Self.h2) { request, responder in
            responder.send(.init(status: 200, body: Array("\(request.body.count)".utf8)))
        } _: { client, double in
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<5 { group.addTask { try await Self.post(client, double.url + "/big", body: large).body } }
                for try await answer in group { #expect(answer == "200000") }
            }
            #expect(double.requests.count == 5)
            #expect(double.requests.allSatisfy { $0.body.count == 200_000 })
            #expect(double.connections == 1)
        }
    }

    @Test(
        "an answer sent later, from another task, arrives; one never sent leaves the client waiting until its deadline")
    func laterAndNever() async throws {
        let held = Mutex<[PushDouble.Responder]>([])
        try await Self.with(Self.h2) { request, responder in
            if request.path == "/later" { held.withLock { $0.append(responder) } }
        } _: { client, double in
            async let later = Self.post(client, double.url + "/later")
            _ = try await double.waitFor(1) { $0.path == "/later" }
            let responders = held.withLock { $0 }
            #expect(responders.count == 1)
            Task.detached { responders.first?.send(.init(status: 202)) }
            let laterStatus = try await later.status
            #expect(laterStatus == 202)
            // The deadline is long enough for the request to reach the double on a loaded machine
            // (300 ms was not, in CI); the double records it, and the client still waits it out.
            let never = Task { try await Self.post(client, double.url + "/never", timeout: .seconds(3)) }
            _ = try await double.waitFor(1) { $0.path == "/never" }
            #expect(double.requests.map(\.path) == ["/later", "/never"])
            await #expect(throws: (any Error).self) { _ = try await never.value }
        }
    }

    @Test("a delayed answer comes no sooner than its delay")
    func delayed() async throws {
        try await Self.with(Self.h2) { _, responder in
            responder.send(.init(status: 200, delay: .milliseconds(300)))
        } _: { client, double in
            let start = ContinuousClock.now
            let slow = try await Self.post(client, double.url + "/slow")
            #expect(slow.status == 200)
            #expect(ContinuousClock.now - start >= .milliseconds(300))
        }
    }

    @Test("GOAWAY after an answer: the connection closes, and the next request comes on a new one")
    func goAway() async throws {
        try await Self.with(Self.h2) { request, responder in
            responder.send(.init(status: 200, goAway: request.path == "/first"))
        } _: { client, double in
            let first = try await Self.post(client, double.url + "/first")
            #expect(first.status == 200)
            // The client may still pick the closing connection: retried until the double answers
            // on the second one, within a deadline.
            let deadline = ContinuousClock.now + .seconds(20)
            while double.connections < 2 || double.requests.last?.path != "/second" {
                guard ContinuousClock.now < deadline else { break }
                _ = try? await Self.post(client, double.url + "/second")
            }
            #expect(double.connections == 2)
            #expect(double.requests.first?.connection == 1)
            #expect(double.requests.last?.path == "/second" && double.requests.last?.connection == 2)
        }
    }

    @Test("HTTP/1.1 only: the client falls back to it, and a kept-alive connection's requests are answered in order")
    func http1() async throws {
        try await Self.with({ .http1(certificate: $0.serverCertificate, key: $0.serverKey) }) { request, responder in
            responder.send(.init(status: 200, headers: [("x-path", request.path)], body: Array(request.body)))
        } _: { client, double in
            for n in 0..<3 {
                let answer = try await Self.post(client, double.url + "/one/\(n)", body: "body \(n)")
                #expect(answer.version == .http1_1)
                #expect(answer.body == "body \(n)" && answer.headers.contains { $0 == ("x-path", "/one/\(n)") })
            }
            #expect(double.requests.map(\.path) == ["/one/0", "/one/1", "/one/2"])
            #expect(double.requests.allSatisfy { $0.method == "POST" && $0.connection == 1 })
        }
    }

    @Test(
        "with a client CA, as APNs with certificates: a client without a certificate of that CA is refused, one with it is served"
    )
    func clientCertificates() async throws {
        let withCA: (APNsTestCertificates) -> PushDouble.Transport = {
            .tls(certificate: $0.serverCertificate, key: $0.serverKey, clientCA: $0.ca)
        }
        try await Self.with(withCA) { _, responder in
            responder.send(.init(status: 200))
        } _: { client, double in
            await #expect(throws: (any Error).self) {
                _ = try await Self.post(client, double.url + "/anonymous", timeout: .seconds(3))
            }
            #expect(double.requests.isEmpty)
        }
        try await Self.with(withCA, identity: true) { _, responder in
            responder.send(.init(status: 200))
        } _: { client, double in
            let known = try await Self.post(client, double.url + "/known")
            #expect(known.status == 200)
            #expect(double.requests.map(\.path) == ["/known"])
        }
    }

    @Test("without recording, requests are answered and none is kept")
    func withoutRecording() async throws {
        let answered = Atomic(0)
        try await Self.with(Self.h2, record: false) { _, responder in
            answered.add(1, ordering: .relaxed)
            responder.send(.init(status: 200))
        } _: { client, double in
            for _ in 0..<3 {
                let answer = try await Self.post(client, double.url + "/x")
                #expect(answer.status == 200)
            }
            #expect(answered.load(ordering: .relaxed) == 3)
            #expect(double.requests.isEmpty)
        }
    }
}
