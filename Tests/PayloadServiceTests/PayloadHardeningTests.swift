import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTestSupport
import PayloadService
import Testing

/// Inputs that once broke a service, at the unit that now refuses them: payload.
@Suite("hardening: payload", .watchedForStalls)
struct PayloadHardeningTests {
    @Test(
        "a TTL of any size is refused or stored, never an arithmetic trap",
        arguments: StoreBackend.available,
        [
            Int64.max, 9_223_372_036_854_775, 9_300_000_000_000_000, ContentLimits.maxTTLSeconds + 1, -1, Int64.min,
        ])
    func hugeTTL(_ backend: StoreBackend, _ ttl: Int64) async throws {
        try await withPayloadStore(backend) { store in
            await #expect(throws: ServiceError.self) {
                try await store.store(
                    StorePayloadRequest(recipient: "bob", kind: .secure, content: [1], ttlSeconds: ttl))
            }
            let longest = try await store.store(
                StorePayloadRequest(
                    recipient: "bob", kind: .secure, content: [1], ttlSeconds: ContentLimits.maxTTLSeconds))
            #expect(longest.expiresAtUnixMs > unixMillis())
        }
    }

    @Test("a clock near the end of time is an error, not a trap")
    func overflowingClock() async throws {
        try await withPayloadStore(.sqlite, now: { Int64.max - 10 }) { store in
            await #expect(throws: ServiceError.self) {
                try await store.store(
                    StorePayloadRequest(recipient: "bob", kind: .secure, content: [1], ttlSeconds: 60))
            }
        }
    }

    @Test("content for a name that is not a user name, or with a type that could split a header, is refused")
    func payloadFields() async throws {
        try await withPayloadStore(.sqlite) { store in
            for recipient in ["", "a b", "username:bob", String(repeating: "x", count: 65)] {
                await #expect(throws: ServiceError.self, "\(recipient)") {
                    try await store.store(StorePayloadRequest(recipient: recipient, kind: .secure, content: [1]))
                }
            }
            for type in ["text/html\r\nSet-Cookie: a=b", "image/png\u{7f}", String(repeating: "a", count: 256)] {
                await #expect(throws: ServiceError.self) {
                    try await store.store(
                        StorePayloadRequest(recipient: "bob", kind: .rich, content: [1], contentType: type))
                }
            }
        }
    }

    @Test("deleting content is for its recipient only, and then it is gone", arguments: StoreBackend.available)
    func deletePayload(_ backend: StoreBackend) async throws {
        try await withPayloadStore(backend) { store in
            let stored = try await store.store(StorePayloadRequest(recipient: "bob", kind: .rich, content: [1, 2, 3]))
            await #expect(throws: ServiceError.notFound("notification \(stored.id) not found")) {
                try await store.delete(id: stored.id, recipient: "mallory")
            }
            try await store.delete(id: stored.id, recipient: "bob")
            await #expect(throws: ServiceError.self) { try await store.fetch(id: stored.id, requester: "bob") }
            await #expect(throws: ServiceError.self) { try await store.delete(id: stored.id, recipient: "bob") }
        }
    }
}
