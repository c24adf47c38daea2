import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Logging
import PayloadService
import Testing

/// herald-payload's RPC handlers as any gRPC client calls them: content is its recipient's alone,
/// read once as unread, and a user's export and erase name that user.
@Suite("payload handlers", .watchedForStalls)
struct PayloadHandlersTests {
    static let context = RPCContext(requestID: "payload", method: "test", logger: Logger(label: "test"))

    static func withHandlers(testMode: Bool = false, _ body: (PayloadHandlers) async throws -> Void) async throws {
        try await withPayloadStore(.sqlite) { store in try await body(PayloadHandlers(store: store, testMode: testMode))
        }
    }

    @Test("only the recipient fetches; the first fetch answers unread and every later one read")
    func fetch() async throws {
        try await Self.withHandlers { handlers in
            let stored = try await handlers.storePayload(
                StorePayloadRequest(recipient: "alice", kind: .secure, content: Array("code 1234".utf8), sender: "bob"),
                context: Self.context)
            for requester in ["", "bob", "Alice", "alice ", "mallory"] {
                #expect(
                    await statusCode {
                        try await handlers.fetchPayload(
                            FetchPayloadRequest(id: stored.id, requester: requester), context: Self.context)
                    } == .notFound, "\(requester)")
            }
            let first = try await handlers.fetchPayload(
                FetchPayloadRequest(id: stored.id, requester: "alice"), context: Self.context)
            #expect(first.content == Array("code 1234".utf8) && !first.read && first.kind == .secure)
            #expect(first.contentType == "text/plain; charset=utf-8")
            let again = try await handlers.fetchPayload(
                FetchPayloadRequest(id: stored.id, requester: "alice"), context: Self.context)
            #expect(again.read)
            for id: Int64 in [0, -1, stored.id + 1, .max] {
                #expect(
                    await statusCode {
                        try await handlers.fetchPayload(
                            FetchPayloadRequest(id: id, requester: "alice"), context: Self.context)
                    } == .notFound)
            }
        }
    }

    @Test("a delete is the recipient's: another user's is NOT_FOUND and the content stays")
    func delete() async throws {
        try await Self.withHandlers { handlers in
            let stored = try await handlers.storePayload(
                StorePayloadRequest(recipient: "alice", kind: .rich, content: [1, 2, 3]), context: Self.context)
            #expect(
                await statusCode {
                    try await handlers.deletePayload(
                        DeletePayloadRequest(id: stored.id, recipient: "bob"), context: Self.context)
                } == .notFound)
            _ = try await handlers.fetchPayload(
                FetchPayloadRequest(id: stored.id, requester: "alice"), context: Self.context)
            _ = try await handlers.deletePayload(
                DeletePayloadRequest(id: stored.id, recipient: "alice"), context: Self.context)
            #expect(
                await statusCode {
                    try await handlers.fetchPayload(
                        FetchPayloadRequest(id: stored.id, requester: "alice"), context: Self.context)
                } == .notFound)
        }
    }

    @Test("a user's export: received with content, sent without; paged by id; `after` a content id or refused")
    func export() async throws {
        try await Self.withHandlers { handlers in
            var ids: [Int64] = []
            for n in 0..<5 {
                let (recipient, sender) = n.isMultiple(of: 2) ? ("alice", "bob") : ("bob", "alice")
                ids.append(
                    try await handlers.storePayload(
                        StorePayloadRequest(
                            recipient: recipient, kind: .secure, content: Array("m\(n)".utf8), sender: sender),
                        context: Self.context
                    ).id)
            }
            _ = try await handlers.storePayload(
                StorePayloadRequest(recipient: "carol", kind: .secure, content: [9], sender: "dave"),
                context: Self.context)
            var items: [[String: Any]] = []
            var after = ""
            var pages = 0
            repeat {
                let page = try await handlers.exportUser(
                    ExportUserRequest(user: "alice", after: after, limit: 2), context: Self.context)
                items += page.items.compactMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
                after = page.next
                pages += 1
            } while !after.isEmpty && pages < 10
            #expect(items.compactMap { ($0["id"] as? NSNumber)?.int64Value } == ids)
            let received = items.filter { $0["direction"] as? String == "received" }
            let sent = items.filter { $0["direction"] as? String == "sent" }
            #expect(received.count == 3 && sent.count == 2)
            #expect(received.allSatisfy { $0["content"] != nil && $0["sender"] as? String == "bob" })
            #expect(sent.allSatisfy { $0["content"] == nil && $0["recipient"] as? String == "bob" })
            for bad in ["x", "-1", "1.5", "99999999999999999999"] {
                #expect(
                    await statusCode {
                        try await handlers.exportUser(
                            ExportUserRequest(user: "alice", after: bad), context: Self.context)
                    } == .invalidArgument, "\(bad)")
            }
            #expect(
                await statusCode { try await handlers.exportUser(ExportUserRequest(), context: Self.context) }
                    == .invalidArgument)
        }
    }

    @Test("an erase names a user: their content goes, what they sent stays its recipients' without their name")
    func erase() async throws {
        try await Self.withHandlers { handlers in
            let toAlice = try await handlers.storePayload(
                StorePayloadRequest(recipient: "alice", kind: .secure, content: [1], sender: "bob"),
                context: Self.context)
            let fromAlice = try await handlers.storePayload(
                StorePayloadRequest(recipient: "bob", kind: .secure, content: [2], sender: "alice"),
                context: Self.context)
            for user in ["", String(repeating: "u", count: 257)] {
                #expect(
                    await statusCode {
                        try await handlers.eraseUser(EraseUserRequest(user: user), context: Self.context)
                    }
                        == .invalidArgument)
            }
            let erased = try await handlers.eraseUser(EraseUserRequest(user: "alice"), context: Self.context)
            #expect(erased.removed == 1 && erased.redacted == 1)
            #expect(
                await statusCode {
                    try await handlers.fetchPayload(
                        FetchPayloadRequest(id: toAlice.id, requester: "alice"), context: Self.context)
                } == .notFound)
            let kept = try await handlers.fetchPayload(
                FetchPayloadRequest(id: fromAlice.id, requester: "bob"), context: Self.context)
            #expect(kept.content == [2])
            let bobs = try await handlers.exportUser(ExportUserRequest(user: "bob"), context: Self.context)
            let item = try #require(
                bobs.items.first.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] })
            #expect(item["sender"] as? String == "", "the sender's name is gone from what they sent")
            // Idempotent.
            let again = try await handlers.eraseUser(EraseUserRequest(user: "alice"), context: Self.context)
            #expect(again.removed == 0 && again.redacted == 0)
        }
    }

    @Test("ResetForTests runs only in test mode")
    func reset() async throws {
        try await Self.withHandlers { handlers in
            #expect(
                await statusCode { try await handlers.resetForTests(ResetForTestsRequest(), context: Self.context) }
                    == .failedPrecondition)
        }
        try await Self.withHandlers(testMode: true) { handlers in
            _ = try await handlers.storePayload(
                StorePayloadRequest(recipient: "alice", kind: .secure, content: [1]), context: Self.context)
            #expect(try await handlers.resetForTests(ResetForTestsRequest(), context: Self.context).deleted == 1)
        }
    }
}
