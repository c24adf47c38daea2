import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import PushProviders
import Testing

@testable import DispatchService

/// The inbox, the provider of a deployment without push credentials: what each device would have
/// been sent, byte for byte with its headers, paged from either end and by device, on both
/// databases; and purged by age.
@Suite("inbox provider", .watchedForStalls)
struct InboxProviderTests {
    static func item(_ n: Int, platform: Platform = .apns, handle: String? = nil, body: [UInt8]? = nil) -> PushItem {
        var options = DeliveryOptions()
        switch platform {
        case .apns:
            options = DeliveryOptions(
                pushType: "alert", priority: 10, contentType: "c\"\\\n\(n)", expiresAtUnixMs: 2_000_000_000_000,
                collapseID: "group-\(n)")
        case .wns:
            options = DeliveryOptions(
                pushType: "wns/raw", contentType: "application/octet-stream", collapseID: "a-tag-longer-than-16")
        case .browser: options = DeliveryOptions(priority: 5, expiresAtUnixMs: unixMillis() + 60_000, collapseID: "t")
        default: break
        }
        return PushItem(
            sequence: Int64(n), notificationID: "n-\(n / 10)", registrationID: "r\(n)", platform: platform,
            handle: handle ?? "h\(n)", messageID: "m\(n)", attempt: 1, giveUpAt: 0,
            payload: OutboxPayload(platform: platform, options: options, body: body ?? Array("push \(n)".utf8)))
    }

    @Test("each push as recorded: its platform's headers, its exact bytes, in order", arguments: StoreBackend.available)
    func records(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { f in
            let bytes: [UInt8] = [0, 0xFF, 0xC3, 0x28, 0x0A, 0x22]
            let items = [
                Self.item(1, platform: .apns), Self.item(2, platform: .fcm), Self.item(3, platform: .wns),
                Self.item(4, platform: .browser, body: bytes),
            ]
            #expect(await f.inbox.send(items) == Array(repeating: .delivered(status: 200), count: 4))
            let entries = try await f.inbox.list(after: 0, limit: 10)
            #expect(entries.map(\.registrationID) == ["r1", "r2", "r3", "r4"])
            #expect(entries.map(\.platform) == [.apns, .fcm, .wns, .browser])
            #expect(entries[3].payload == bytes, "bytes that are not UTF-8 come back as they went in")
            for (entry, item) in zip(entries, items) {
                // The TTLs count down from when the push was recorded: compared by name only.
                func stable(_ headers: [Header]) -> [Header] {
                    headers.map { ["ttl", "x-wns-ttl"].contains($0.name) ? Header(name: $0.name, value: "") : $0 }
                }
                #expect(stable(entry.headers) == stable(InboxProvider.headers(item.payload)), "\(item.platform)")
                #expect(entry.notificationID == item.notificationID && entry.handle == item.handle)
                #expect(entry.recordedAtUnixMs > 0)
            }
            // A header value with a quote, a backslash and a newline came back whole.
            #expect(entries[0].headers.contains { $0.name == "content-type" && $0.value == "c\"\\\n1" })
            // Everything the real sender would send of the push's options, as each platform spells it:
            // the expiry and the collapse id too.
            #expect(entries[0].headers.contains(Header(name: "apns-expiration", value: "2000000000")))
            #expect(entries[0].headers.contains(Header(name: "apns-collapse-id", value: "group-1")))
            #expect(entries[2].headers.contains(Header(name: "x-wns-tag", value: "a-tag-longer-tha")))
            #expect(entries[3].headers.contains(Header(name: "topic", value: "t")))
            let ttl = entries[3].headers.first { $0.name == "ttl" }.flatMap { Int($0.value) } ?? 0
            #expect((55...60).contains(ttl), "\(entries[3].headers)")
            #expect(try await f.inbox.deleteEverything() == 4)
            #expect(try await f.inbox.list(after: 0, limit: 10).isEmpty)
        }
    }

    @Test(
        "pages: oldest first after a sequence, newest first before one, one device's only",
        arguments: StoreBackend.available)
    func pages(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { f in
            let items = (0..<9).map { Self.item($0, handle: $0.isMultiple(of: 3) ? "shared" : nil) }
            _ = await f.inbox.send(items)
            let all = try await f.inbox.list(after: 0, limit: 100)
            let sequences = all.map(\.sequence)
            #expect(sequences == sequences.sorted() && sequences.count == 9)
            let second = try await f.inbox.list(.after(sequences[2]), limit: 3)
            #expect(second.map(\.sequence) == Array(sequences[3..<6]))
            let newest = try await f.inbox.list(.newestBefore(0), limit: 2)
            #expect(newest.map(\.sequence) == [sequences[8], sequences[7]])
            let before = try await f.inbox.list(.newestBefore(sequences[7]), limit: 100)
            #expect(before.map(\.sequence) == Array(sequences[0..<7].reversed()))
            let shared = try await f.inbox.list(after: 0, limit: 100, handle: "shared")
            #expect(shared.map(\.registrationID) == ["r0", "r3", "r6"])
            #expect(try await f.inbox.list(after: 0, limit: 100, handle: "nobody").isEmpty)
            #expect(try await f.inbox.list(after: sequences[8], limit: 100).isEmpty)
        }
    }

    @Test("purge: what was recorded before the time goes, what came after stays", arguments: StoreBackend.available)
    func purge(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { f in
            _ = await f.inbox.send((0..<5).map { Self.item($0) })
            let none = try await f.inbox.purge(before: 0)
            let kept = try await f.inbox.list(after: 0, limit: 10)
            #expect(none == 0 && kept.count == 5)
            let all = try await f.inbox.purge(before: unixMillis() + 1000)
            let left = try await f.inbox.list(after: 0, limit: 10)
            #expect(all == 5 && left.isEmpty)
        }
    }

    @Test("the headers column: pairs written as JSON and read back; a row that is not such JSON reads as no headers")
    func headerColumn() {
        let headers = [
            Header(name: "apns-push-type", value: "alert"), Header(name: "x", value: "\"]\\,[\u{0}\u{2028}"),
        ]
        #expect(InboxProvider.decode(InboxProvider.encode(headers)) == headers)
        #expect(InboxProvider.encode([]) == "[]")
        for junk in ["", "{", "[[1,2]]", #"[["only-name"]]"#, #"{"a":"b"}"#, "null"] {
            #expect(InboxProvider.decode(junk).isEmpty, "\(junk)")
        }
        #expect(InboxProvider.decode(#"[["a","b"],["c"],["d","e","f"],["g","h"]]"#).map(\.name) == ["a", "g"])
    }
}
