import AuthService
@testable import Edge
import Foundation
import GRDB
import HeraldProto
import HeraldRPC
import HeraldModel
import HeraldService
import PayloadService
import RegistrationService
import Testing

/// Each input that once broke a service (issue 12), at the unit that now refuses it.
@Suite("hardening")
struct HardeningTests {
    @Test("a TTL of any size is refused or stored, never an arithmetic trap", arguments: [
        Int64.max, 9_223_372_036_854_775, 9_300_000_000_000_000, ContentLimits.maxTTLSeconds + 1, -1, Int64.min,
    ])
    func hugeTTL(_ ttl: Int64) throws {
        let store = try PayloadStore(db: DatabaseQueue())
        #expect(throws: ServiceError.self) {
            try store.store(StorePayloadRequest(recipient: "bob", kind: .secure, content: [1], ttlSeconds: ttl))
        }
        let longest = try store.store(
            StorePayloadRequest(recipient: "bob", kind: .secure, content: [1], ttlSeconds: ContentLimits.maxTTLSeconds))
        #expect(longest.expiresAtUnixMs > unixMillis())
    }

    @Test("a clock near the end of time is an error, not a trap")
    func overflowingClock() throws {
        let store = try PayloadStore(db: DatabaseQueue(), now: { Int64.max - 10 })
        #expect(throws: ServiceError.self) {
            try store.store(StorePayloadRequest(recipient: "bob", kind: .secure, content: [1], ttlSeconds: 60))
        }
    }

    @Test("content for a name that is not a user name, or with a type that could split a header, is refused")
    func payloadFields() throws {
        let store = try PayloadStore(db: DatabaseQueue())
        for recipient in ["", "a b", "username:bob", String(repeating: "x", count: 65)] {
            #expect(throws: ServiceError.self, "\(recipient)") {
                try store.store(StorePayloadRequest(recipient: recipient, kind: .secure, content: [1]))
            }
        }
        for type in ["text/html\r\nSet-Cookie: a=b", "image/png\u{7f}", String(repeating: "a", count: 256)] {
            #expect(throws: ServiceError.self) {
                try store.store(StorePayloadRequest(recipient: "bob", kind: .rich, content: [1], contentType: type))
            }
        }
    }

    @Test("deleting content is for its recipient only, and then it is gone")
    func deletePayload() throws {
        let store = try PayloadStore(db: DatabaseQueue())
        let stored = try store.store(StorePayloadRequest(recipient: "bob", kind: .rich, content: [1, 2, 3]))
        #expect(throws: ServiceError.notFound("notification \(stored.id) not found")) {
            try store.delete(id: stored.id, recipient: "mallory")
        }
        try store.delete(id: stored.id, recipient: "bob")
        #expect(throws: ServiceError.self) { try store.fetch(id: stored.id, requester: "bob") }
        #expect(throws: ServiceError.self) { try store.delete(id: stored.id, recipient: "bob") }
    }

    @Test("ids and counts have one spelling: digits, no sign, no leading zero, within Int64")
    func strictIntegers() {
        #expect(Names.positiveInteger("120") == 120)
        #expect(Names.positiveInteger("9223372036854775807") == Int64.max)
        for bad in ["+120", "0120", "0", "-1", " 7", "7 ", "1e3", "", "9223372036854775808", "99999999999999999999", "１２", "0x10"] {
            #expect(Names.positiveInteger(bad) == nil, "\(bad)")
        }
    }

    @Test("WNS channels and Web Push endpoints with control characters or spaces are refused")
    func handleInjection() throws {
        let good = "https://db5.notify.windows.com/?token=abc"
        try RegistrationRules.validateHandle(good, platform: .wns)
        for bad in [
            "https://db5.notify.windows.com/\r\nX-Injected: 1", "https://db5.notify.windows.com/\nX: 1",
            "https://db5.notify.windows.com/ a", "https://db5.notify.windows.com/\u{0}", "https://db5.notify.windows.com/\t",
        ] {
            #expect(throws: ServiceError.self, "\(bad.debugDescription)") { try RegistrationRules.validateHandle(bad, platform: .wns) }
        }
        let key = Base64URL.encode([4] + [UInt8](repeating: 1, count: 64))
        let auth = Base64URL.encode([UInt8](repeating: 2, count: 16))
        let subscription = #"{"endpoint":"https://fcm.googleapis.com/fcm/send/x\r\nX-Injected: 1","keys":{"p256dh":"\#(key)","auth":"\#(auth)"}}"#
        #expect(throws: ServiceError.self) { try RegistrationRules.validateHandle(subscription, platform: .browser) }
    }

    @Test("uploaded content is never sniffed, and is a download unless an image, a sound or a video")
    func contentHeaders() {
        for type in ["text/html", "text/html; charset=utf-8", "image/svg+xml", "application/xhtml+xml", "application/pdf", "text/plain", "TEXT/HTML"] {
            let headers = EdgeRoutes.contentHeaders(type)
            #expect(headers[.xContentTypeOptions] == "nosniff")
            #expect(headers[.contentDisposition] == "attachment", "\(type)")
            #expect(headers[.contentSecurityPolicy]?.contains("sandbox") == true)
        }
        for type in ["image/png", "image/jpeg", "audio/mpeg", "video/mp4", "IMAGE/PNG; q=1"] {
            let headers = EdgeRoutes.contentHeaders(type)
            #expect(headers[.xContentTypeOptions] == "nosniff")
            #expect(headers[.contentDisposition] == nil, "\(type)")
        }
    }

    @Test("the login gate refuses at once past its bound, and frees the slot when a login ends")
    func loginGateBound() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 2, failureBudgetPerMinute: 100, now: clock.function)
        try gate.enter()
        try gate.enter()
        #expect(throws: ServiceError(.resourceExhausted, "too many logins in progress; retry after 1 s")) { try gate.enter() }
        gate.leave(failed: false)
        try gate.enter()
    }

    @Test("the login gate queues fewer when hashes are slow: no login waits past its bound")
    func loginGateWait() throws {
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 1000, maxWaitMilliseconds: 2000, threads: 2)
        try gate.enter()
        gate.leave(failed: false, hashDuration: .milliseconds(900))  // a loaded machine: 0.9 s a hash
        // Two run at once, two more finish in a second round (1.8 s); a fifth would take 2.7 s.
        for _ in 0..<4 { try gate.enter() }
        #expect(throws: ServiceError.self) { try gate.enter() }
    }

    @Test("the failed-login budget is global, refills over a minute, and says when to retry")
    func loginGateBudget() throws {
        let clock = ManualClock()
        let gate = LoginGate(maxPending: 100, failureBudgetPerMinute: 6, now: clock.function)
        for _ in 0..<6 {
            try gate.enter()
            gate.leave(failed: true)
        }
        #expect(throws: ServiceError(.resourceExhausted, "too many failed logins on this server; retry after 10 s")) { try gate.enter() }
        clock.advance(seconds: 10)
        try gate.enter()
        gate.leave(failed: false)
    }

    @Test("a spray of logins with unknown names is refused at once past the bound; a cached login still works")
    func spray() async throws {
        let store = try AccountStore(db: DatabaseQueue())
        let auth = try Authenticator(
            mode: .accounts, store: store, hasher: PasswordHasher(logN: 14), gate: LoginGate(maxPending: 2, failureBudgetPerMinute: 1000))
        _ = try await auth.createUser("alice", password: "correct horse")
        let alice = AuthTests.basic("alice:correct horse")
        _ = try await auth.authenticate(alice)  // now cached
        let codes = await withTaskGroup(of: StatusCode?.self) { group in
            for index in 0..<50 {
                group.addTask { await AuthTests.code { try await auth.authenticate(AuthTests.basic("spray\(index):guess-\(index)")) } }
            }
            return await group.reduce(into: [StatusCode?]()) { $0.append($1) }
        }
        #expect(codes.allSatisfy { $0 == .unauthenticated || $0 == .resourceExhausted })
        #expect(codes.filter { $0 == .resourceExhausted }.count >= 40)
        #expect(try await auth.authenticate(alice).user == "alice")
    }

    @Test("the edge's JSON error body is the shape every client reads")
    func errorBody() throws {
        let body = EdgeError(.badRequest, #"a "quoted" \ message"#).jsonBody()
        let object = try #require(try JSONSerialization.jsonObject(with: Data(body)) as? [String: String])
        #expect(object == ["error": "bad_request", "message": #"a "quoted" \ message"#])
    }

    @Test("the OpenAPI document the edge serves is JSON with every route")
    func openAPI() throws {
        let document = try #require(try JSONSerialization.jsonObject(with: Data(OpenAPIDocument.json.utf8)) as? [String: Any])
        #expect(document["openapi"] as? String == "3.1.0")
        let paths = try #require(document["paths"] as? [String: Any])
        for path in [
            "/api/register", "/api/register/{id}", "/api/notifications", "/api/notifications/{id}", "/v1/notifications",
            "/v1/notifications/{id}/outcome", "/v1/auth/token", "/healthz", "/readyz", "/metrics", "/openapi.json",
        ] {
            #expect(paths[path] != nil, "\(path)")
        }
    }
}
