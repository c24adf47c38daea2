import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import PayloadService
import Testing

/// Inputs that once broke a service (issue 12), at the unit that now refuses them: payload.
@Suite("hardening: payload")
struct PayloadHardeningTests {
    @Test(
        "a TTL of any size is refused or stored, never an arithmetic trap",
        arguments: [
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
}
