import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import PushProviders
import Synchronization
import Testing

@testable import DispatchService

/// An empty outbox of `backend` (SQLite in memory, or PostgreSQL in a fresh schema) with its inbox,
/// and a way to make another replica on the same database (PostgreSQL only; nil on SQLite).
struct OutboxFixture {
    let outbox: Outbox
    let inbox: InboxProvider
    let replica: (@Sendable (String) async throws -> Outbox)?
    /// The migrated database itself (hubs' credentials share it; rows written by hand).
    let db: any SQLDatabase
}

func withOutbox(
    _ backend: StoreBackend, lease: Duration = .seconds(90), now: @escaping @Sendable () -> Int64 = unixMillis,
    _ body: (OutboxFixture) async throws -> Void
) async throws {
    switch backend {
    case .sqlite:
        let db = try SQLiteDatabase.inMemory()
        try await body(
            OutboxFixture(
                outbox: try Outbox(db: db, lease: lease, now: now), inbox: try InboxProvider(db: db), replica: nil,
                db: db))
    case .postgres:
        try await TestDatabases.withPostgres(service: "dispatch") { db in
            let make: @Sendable (String) async throws -> Outbox = { name in
                try await Outbox(postgres: db, replica: name, lease: lease, now: now)
            }
            try await body(
                OutboxFixture(
                    outbox: try await make("replica-a"), inbox: InboxProvider(postgres: db), replica: make, db: db.sql))
        }
    }
}

@Suite("outbox store: both backends, and PostgreSQL replicas", .watchedForStalls)
struct OutboxStoreTests {
    static let apns = OutboxPayload(
        platform: .apns, options: DeliveryOptions(pushType: "alert", priority: 10), body: Array("{}".utf8))
    static let fcm = OutboxPayload(
        platform: .fcm, options: DeliveryOptions(contentType: "application/json"), body: Array("{\"m\":1}".utf8))

    static func targets(_ count: Int, _ platform: Platform = .apns, prefix: String = "r") -> [Outbox.Target] {
        (0..<count).map {
            Outbox.Target(registrationID: "\(prefix)-\($0)", platform: platform, handle: "\(prefix)h\($0)")
        }
    }

    static func send(
        _ outbox: Outbox, _ id: String, _ targets: [Outbox.Target], payloads: [OutboxPayload] = [apns, fcm]
    )
        async throws
    {
        _ = try await outbox.enqueue(
            Outbox.Send(
                id: id, sender: "s", targetUser: "u", targetTag: "", payloads: payloads, retryWindow: .seconds(600),
                originalBody: Array("body of \(id)".utf8)), targets: targets)
    }

    static func delivered(_ item: PushItem) -> Outbox.Decision {
        Outbox.Decision(
            sequence: item.sequence, notificationID: item.notificationID, platform: item.platform, state: .delivered,
            status: 200,
            reason: "", nextAttemptAt: 0, removal: nil, attempt: item.attempt)
    }

    @Test("a send is claimed in order, its results counted, and it completes once", arguments: StoreBackend.available)
    func claimAndRecord(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "n-1", Self.targets(3) + Self.targets(2, .fcm, prefix: "f"))
            let outcome = try await outbox.outcome(of: "n-1", scope: .everyHub)
            #expect(outcome.state == .enqueued && outcome.platforms.map(\.pending) == [3, 2])
            #expect(outcome.originalBody == Array("body of n-1".utf8), "kept for NH telemetry's NotificationBody")
            // The metrics' sample: 5 deliveries waiting, the send open since it was made.
            let open = try await outbox.depth()
            #expect(open.pending == 5 && open.oldestOpenSend == outcome.createdAtUnixMs)
            let items = try await outbox.claim(limit: 10, platforms: [.apns, .fcm])
            #expect(items.map(\.registrationID) == ["r-0", "r-1", "r-2", "f-0", "f-1"])
            #expect(items.allSatisfy { $0.attempt == 1 } && Set(items.map(\.messageID)).count == 5)
            #expect(items[3].payload == Self.fcm && items[0].payload == Self.apns)
            #expect(try await outbox.claim(limit: 10, platforms: [.apns, .fcm]).isEmpty)  // leased
            #expect(try await outbox.outcome(of: "n-1", scope: .everyHub).state == .processing)

            var failed = Self.delivered(items[4])
            failed.state = .failed
            failed.reason = "BadToken"
            failed.status = 400
            failed.removal = (.fcm, items[4].handle, 7)
            #expect(try await outbox.record(items.prefix(4).map(Self.delivered)).isEmpty)
            #expect(try await outbox.depth().pending == 1, "one delivery still leased")
            let finished = try await outbox.record([failed])
            #expect(finished.map(\.id) == ["n-1"] && finished.map(\.state) == [.completed])
            let done = try await outbox.outcome(of: "n-1", scope: .everyHub)
            #expect(done.state == .completed && done.finishedAtUnixMs > 0)
            #expect(done.platforms.map(\.success) == [3, 1] && done.platforms.map(\.failure) == [0, 1])
            #expect(done.platforms[1].failures.map(\.reason) == ["BadToken"] && done.platforms[1].removedHandles == 1)
            #expect(try await outbox.pendingRemovals(limit: 10).map(\.handle) == ["fh1"])
            let records = try await outbox.deliveries(
                of: "n-1", scope: .everyHub, failedOnly: true, after: 0, limit: 10)
            #expect(records.map(\.registrationID) == ["f-1"] && records.first?.attempts == 1)
            await #expect(throws: ServiceError.self) {
                try await outbox.outcome(of: "n-1", scope: .sender("mallory", hub: ""))
            }
            let finishedDepth = try await outbox.depth()
            #expect(finishedDepth.pending == 0 && finishedDepth.oldestOpenSend == nil)
            #expect(try await outbox.purge(before: unixMillis() + 1000) == 1)
        }
    }

    @Test(
        "a claim takes the oldest due first across its platforms, and one platform's backlog does not hide another's rows",
        arguments: StoreBackend.available)
    func claimAcrossPlatforms(_ backend: StoreBackend) async throws {
        let start = unixMillis() - 10_000
        let clock = Mutex(start)
        try await withOutbox(backend, now: { clock.withLock { $0 } }) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "n-old", Self.targets(2, .fcm, prefix: "old"), payloads: [Self.fcm])
            clock.withLock { $0 += 1000 }
            try await Self.send(outbox, "n-apns", Self.targets(30, prefix: "a"), payloads: [Self.apns])
            clock.withLock { $0 += 1000 }
            try await Self.send(outbox, "n-fcm", Self.targets(3, .fcm, prefix: "f"), payloads: [Self.fcm])
            clock.withLock { $0 += 1000 }
            #expect(try await outbox.nextDue() == start, "the earliest of every platform's")
            // FCM's claim, behind 30 due APNs rows: FCM's own, oldest first.
            let fcm = try await outbox.claim(limit: 4, platforms: [.fcm])
            #expect(fcm.map(\.registrationID) == ["old-0", "old-1", "f-0", "f-1"])
            // Across platforms: the oldest due first (then by sequence), at most `limit`.
            let first = try await outbox.claim(limit: 12, platforms: [.fcm, .apns])
            #expect(first.map(\.registrationID) == (0..<12).map { "a-\($0)" })
            let rest = try await outbox.claim(limit: 100, platforms: [.fcm, .apns])
            #expect(rest.map(\.registrationID) == (12..<30).map { "a-\($0)" } + ["f-2"])
        }
    }

    @Test(
        "erase: a delivery not yet tried fails as Erased and counts; one in flight is waited for; records keep their counts, blanked",
        arguments: StoreBackend.available)
    func eraseDevices(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            // r-0 and r-1 are the user's; r-2 someone else's.
            try await Self.send(outbox, "n-1", Self.targets(3))
            let devices = (0..<2).map { UserDevice(registrationID: "r-\($0)", platform: .apns, handle: "rh\($0)") }
            let inFlight = try await outbox.claim(limit: 1, platforms: [.apns])
            #expect(inFlight.map(\.registrationID) == ["r-0"])
            let first = try await outbox.eraseDevices(devices)
            #expect(first.inFlight == 1 && first.redacted == 1, "r-0's push is in flight: its result is not in yet")
            // r-1, not tried, failed as Erased and counted; r-0's result comes in, then a second run.
            #expect(try await outbox.claim(limit: 10, platforms: [.apns]).map(\.registrationID) == ["r-2"])
            _ = try await outbox.record([Self.delivered(inFlight[0])])
            let second = try await outbox.eraseDevices(devices)
            #expect(second.inFlight == 0 && second.redacted == 1)
            let records = try await outbox.deliveries(
                of: "n-1", scope: .everyHub, failedOnly: false, after: 0, limit: 10)
            #expect(records.map(\.registrationID) == ["", "", "r-2"] && records.map(\.handle) == ["", "", "rh2"])
            let outcome = try await outbox.outcome(of: "n-1", scope: .everyHub)
            #expect(outcome.platforms[0].success == 1 && outcome.platforms[0].failure == 1)
            #expect(outcome.platforms[0].failures.map(\.reason) == ["Erased"] && outcome.platforms[0].pending == 1)
            #expect(try await outbox.eraseDevices(devices) == ErasedRows(), "idempotent")

            // Sends: the user's name goes from sender and target; the finished send to them alone
            // loses its payloads and body; a scheduled one to their tag is cancelled.
            _ = try await outbox.enqueue(
                Outbox.Send(
                    id: "n-2", sender: "s", targetUser: "zed", targetTag: "", payloads: [Self.apns],
                    retryWindow: .seconds(600), originalBody: Array("for zed".utf8)),
                targets: Self.targets(1, prefix: "z"))
            _ = try await outbox.record(
                try await outbox.claim(limit: 10, platforms: [.apns]).filter { $0.notificationID == "n-2" }.map(
                    Self.delivered))
            _ = try await outbox.schedule(
                id: "n-3", sender: "zed", targetUser: "", targetTag: "username:zed", hub: "default",
                fireAt: unixMillis() + 3_600_000, request: [1], originalBody: Array("later".utf8), maxPending: 100)
            // NH's system tag for an installation's userId, as a tag expression names it.
            _ = try await outbox.schedule(
                id: "n-4", sender: "sas", targetUser: "", targetTag: "$UserId:{zed}", hub: "default",
                fireAt: unixMillis() + 3_600_000, request: [1], originalBody: Array("later".utf8), maxPending: 100)
            let sends = try await outbox.eraseUser("zed", hub: "")
            #expect(sends.removed >= 3, "n-3 and n-4 cancelled, n-2's payload deleted")
            #expect(try await outbox.outcome(of: "n-3", scope: .everyHub).state == .cancelled)
            #expect(try await outbox.outcome(of: "n-4", scope: .everyHub).state == .cancelled)
            let kept = try await outbox.outcome(of: "n-2", scope: .everyHub)
            #expect(kept.state == .completed && kept.originalBody.isEmpty && kept.platforms[0].success == 1)
            #expect(try await outbox.eraseUser("zed", hub: "") == ErasedRows(), "idempotent")
        }
    }

    @Test("inbox deliveries are claimed, written and recorded in one transaction", arguments: StoreBackend.available)
    func localDeliveries(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            try await Self.send(fixture.outbox, "n-l", Self.targets(3) + Self.targets(1, .fcm, prefix: "f"))
            let done = try await fixture.outbox.deliverLocally(
                limit: 100, platforms: [.apns, .fcm], inbox: fixture.inbox)
            #expect(done.delivered == [.apns: 3, .fcm: 1] && done.finished.map(\.state) == [.completed])
            let entries = try await fixture.inbox.list(after: 0, limit: 10)
            #expect(entries.map(\.handle) == ["rh0", "rh1", "rh2", "fh0"])
            #expect(
                entries[0].payload == Self.apns.body
                    && entries[0].headers.contains(Header(name: "apns-push-type", value: "alert")))
            #expect(try await fixture.inbox.list(after: 0, limit: 10, handle: "fh0").map(\.payload) == [Self.fcm.body])
            // The console's order: newest first, paged by the last sequence shown.
            let newest = try await fixture.inbox.list(.newestBefore(0), limit: 2)
            #expect(newest.map(\.handle) == ["fh0", "rh2"])
            #expect(
                try await fixture.inbox.list(.newestBefore(newest[1].sequence), limit: 5).map(\.handle) == [
                    "rh1", "rh0",
                ])
            #expect(try await fixture.inbox.list(.newestBefore(0), limit: 5, handle: "rh1").map(\.handle) == ["rh1"])
            #expect(
                try await fixture.outbox.deliverLocally(limit: 100, platforms: [.apns, .fcm], inbox: fixture.inbox)
                    .delivered.isEmpty)
            #expect(try await fixture.inbox.deleteEverything() == 4)
        }
    }

    @Test(
        "exports: a user's sends, their devices' deliveries and inbox entries, paged; trace parents; the dead-handle queue",
        arguments: StoreBackend.available)
    func exports(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "n-1", Self.targets(2) + Self.targets(1, .fcm, prefix: "f"))
            _ = try await outbox.enqueue(
                Outbox.Send(
                    id: "n-2", sender: "alice", targetUser: "", targetTag: "username:bob", payloads: [Self.apns],
                    retryWindow: .seconds(600), hub: "h2"), targets: Self.targets(1, prefix: "b"))
            _ = try await outbox.deliverLocally(limit: 100, platforms: [.apns, .fcm], inbox: fixture.inbox)
            // Sends by sender, by target user or by the user's own tag; by hub when one is named; by id.
            #expect(try await outbox.exportSends(user: "alice", hub: "", after: "", limit: 10).map(\.id) == ["n-2"])
            #expect(try await outbox.exportSends(user: "bob", hub: "", after: "", limit: 10).map(\.id) == ["n-2"])
            #expect(try await outbox.exportSends(user: "bob", hub: "default", after: "", limit: 10).isEmpty)
            #expect(try await outbox.exportSends(user: "u", hub: "", after: "", limit: 10).map(\.id) == ["n-1"])
            #expect(try await outbox.exportSends(user: "u", hub: "", after: "n-1", limit: 10).isEmpty)
            let sent = try #require(try await outbox.exportSends(user: "s", hub: "default", after: "", limit: 1).first)
            #expect(sent.id == "n-1" && sent.state == .completed && sent.targetUser == "u" && sent.finishedAt > 0)
            // Deliveries and inbox entries of some devices, paged by sequence.
            let deliveries = try await outbox.exportDeliveries(to: ["r-1", "f-0", "b-0"], after: 0, limit: 2)
            #expect(deliveries.map(\.registrationID) == ["r-1", "f-0"])
            #expect(deliveries.allSatisfy { $0.state == .delivered && $0.attempts == 1 })
            let rest = try await outbox.exportDeliveries(
                to: ["r-1", "f-0", "b-0"], after: deliveries[1].sequence, limit: 2)
            #expect(rest.map(\.registrationID) == ["b-0"] && rest[0].handle == "bh0")
            #expect(try await outbox.exportDeliveries(to: [], after: 0, limit: 10).isEmpty)
            let entries = try await outbox.exportInbox(of: ["r-0", "f-0"], after: 0, limit: 10)
            #expect(entries.map(\.handle) == ["rh0", "fh0"] && entries[1].payload == Self.fcm.body)
            #expect(try await outbox.exportInbox(of: ["r-0", "f-0"], after: entries[0].sequence, limit: 10).count == 1)
            #expect(try await outbox.exportInbox(of: [], after: 0, limit: 10).isEmpty)
            // As many devices as one ExportDeviceRecords may name (one bound array, whatever their
            // number): those with records found among the others.
            let many = (0..<ExportLimits.devicesPerCall - 2).map { "x-\($0)" } + ["b-0", "r-0"]
            #expect(
                try await outbox.exportDeliveries(to: many, after: 0, limit: 10).map(\.registrationID) == [
                    "r-0", "b-0",
                ])
            #expect(try await outbox.exportInbox(of: many, after: 0, limit: 10).map(\.handle) == ["rh0", "bh0"])
            // No send here was traced.
            #expect(try await outbox.traceParents(of: ["n-1", "n-2"]).isEmpty)
            #expect(try await outbox.traceParents(of: []).isEmpty)
            #expect(try await outbox.pendingRemovals(limit: 10).isEmpty)
            // The inbox's retention: everything recorded before now + 1 s goes.
            #expect(try await fixture.inbox.purge(before: unixMillis() + 1000) == 4)
            #expect(try await fixture.inbox.list(after: 0, limit: 10).isEmpty)
        }
    }

    @Test(
        "the console's reads: a hub's sends newest first and paged, its minutes, each platform's last error and whether it is failing",
        arguments: StoreBackend.available)
    func consoleReads(_ backend: StoreBackend) async throws {
        let start = (unixMillis() / 60000 - 5) * 60000
        let clock = Mutex(start)
        try await withOutbox(backend, now: { clock.withLock { $0 } }) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "n-a", Self.targets(2, prefix: "a"), payloads: [Self.apns])
            clock.withLock { $0 += 1000 }
            try await Self.send(outbox, "n-b", Self.targets(2, prefix: "b") + Self.targets(1, .fcm, prefix: "bf"))
            clock.withLock { $0 += 60000 }
            try await Self.send(outbox, "n-c", Self.targets(1, prefix: "c"), payloads: [Self.apns])

            #expect(try await outbox.recentSends(hub: "default", before: (Int64.max, ""), limit: 2) == ["n-c", "n-b"])
            #expect(try await outbox.recentSends(hub: "default", before: (start + 1000, "n-b"), limit: 2) == ["n-a"])
            #expect(try await outbox.recentSends(hub: "other", before: (Int64.max, ""), limit: 2).isEmpty)

            let failures = ["b-0": "BadDeviceToken", "c-0": "InvalidProviderToken"]
            let decisions = try await outbox.claim(limit: 10, platforms: [.apns, .fcm]).map { item in
                var decision = Self.delivered(item)
                if let reason = failures[item.registrationID] {
                    (decision.state, decision.status, decision.reason) = (.failed, 400, reason)
                }
                return decision
            }
            #expect(decisions.count == 6)
            _ = try await outbox.record(decisions)

            let minutes = try await outbox.sendStats(hub: "default", since: start)
            #expect(minutes.map(\.startUnixMs) == [start, start + 60000])
            #expect(minutes.map(\.sends) == [2, 1] && minutes.map(\.delivered) == [4, 0])
            #expect(minutes.map { $0.failures.map(\.reason) } == [["BadDeviceToken"], ["InvalidProviderToken"]])
            #expect(try await outbox.sendStats(hub: "default", since: start + 60000).map(\.sends) == [1])

            let health = try await outbox.recentPlatformResults(hub: "default", since: start, limit: 100).health()
            #expect(health[.apns]?.lastError == "InvalidProviderToken" && health[.apns]?.at == start + 61000)
            // n-c, the newest send to APNs, failed on its every device.
            #expect(health[.apns]?.failing == true)
            #expect(health[.fcm] == nil)
            // Without n-c: n-b's APNs failure is the last error, but another of its devices took it.
            let older = try await outbox.recentPlatformResults(hub: "default", since: start, limit: 100)
            var trimmed = older
            trimmed.counts.removeAll { $0.createdAt == start + 61000 }
            trimmed.failures.removeAll { $0.createdAt == start + 61000 }
            #expect(trimmed.health()[.apns]?.lastError == "BadDeviceToken" && trimmed.health()[.apns]?.failing == false)
        }
    }

    @Test(
        "a staged audience joins its send at the commit, each row with its payload variant; discarding one staging leaves another's rows",
        arguments: StoreBackend.available)
    func staging(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            // A template send's audience: two variants, alternating.
            var targets = Self.targets(4)
            for index in targets.indices { targets[index].variant = index % 2 }
            var staged = Outbox.StagedAudience(notificationID: "n-s")
            try await outbox.stage(targets, to: &staged)
            var other = Outbox.StagedAudience(notificationID: "n-t")
            try await outbox.stage(Self.targets(2, prefix: "o"), to: &other)
            await outbox.discardStaged(other)
            var second = Self.apns
            second.variant = 1
            second.body = Array(#"{"aps":{"alert":"variant 1"}}"#.utf8)
            var last = Self.targets(1, prefix: "m")
            last[0].variant = 1
            _ = try await outbox.enqueue(
                Outbox.Send(
                    id: "n-s", sender: "s", targetUser: "", targetTag: "t", payloads: [Self.apns, second],
                    retryWindow: .seconds(60)), targets: last, staged: staged)
            let items = try await outbox.claim(limit: 100, platforms: [.apns])
            #expect(items.map(\.registrationID) == ["r-0", "r-1", "r-2", "r-3", "m-0"])
            #expect(items.map(\.payload.variant) == [0, 1, 0, 1, 1])
            #expect(items.map(\.payload.body) == [0, 1, 0, 1, 1].map { $0 == 0 ? Self.apns.body : second.body })
            #expect(Set(items.map { $0.messageID.prefix(19) }).count == 1 && Set(items.map(\.messageID)).count == 5)
        }
    }

    @Test("a scheduled send is made once, and cancelling it after that is refused", arguments: StoreBackend.available)
    func scheduled(_ backend: StoreBackend) async throws {
        let clock = ManualClock()
        try await withOutbox(backend, now: clock.function) { fixture in
            let outbox = fixture.outbox
            let request: [UInt8] = try SendRequest(targetUser: "u").serializedBytes()
            _ = try await outbox.schedule(
                id: "n-a", sender: "s", targetUser: "u", targetTag: "", hub: "default", fireAt: clock.now + 5000,
                request: request,
                originalBody: Array("scheduled body".utf8), maxPending: 10)
            #expect(try await outbox.dueScheduled(limit: 10).isEmpty)
            clock.advance(seconds: 6)
            #expect(try await outbox.dueScheduled(limit: 10).map(\.request) == [request])
            for expected in [true, false] {
                let made = try await outbox.enqueue(
                    Outbox.Send(
                        id: "n-a", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.apns],
                        retryWindow: .seconds(60)), targets: Self.targets(1), scheduled: true)
                #expect((made != nil) == expected)
            }
            // The body given when it was scheduled stays; making it does not replace it.
            #expect(
                try await outbox.outcome(of: "n-a", scope: .everyHub).originalBody == Array("scheduled body".utf8)
            )
            await #expect(throws: ServiceError.self) { _ = try await outbox.cancelScheduled("n-a", scope: .everyHub) }
            await #expect(throws: ServiceError.self) {
                _ = try await outbox.cancelScheduled("n-none", scope: .everyHub)
            }
        }
    }

    @Test(
        "a hub's scheduled sends are bounded: the next is refused until one is made or cancelled; other hubs are not",
        arguments: StoreBackend.available)
    func scheduledBound(_ backend: StoreBackend) async throws {
        let clock = ManualClock()
        try await withOutbox(backend, now: clock.function) { fixture in
            let outbox = fixture.outbox
            let request: [UInt8] = try SendRequest(targetUser: "u").serializedBytes()
            func schedule(_ id: String, hub: String) async throws {
                _ = try await outbox.schedule(
                    id: id, sender: "s", targetUser: "u", targetTag: "", hub: hub, fireAt: clock.now + 5000,
                    request: request,
                    originalBody: [], maxPending: 3)
            }
            for n in 0..<3 { try await schedule("n-\(n)", hub: "busy") }
            let refused = await #expect(throws: ServiceError.self) { try await schedule("n-3", hub: "busy") }
            #expect(refused?.code == .resourceExhausted, "\(String(describing: refused))")
            try await schedule("n-other", hub: "quiet")
            _ = try await outbox.cancelScheduled("n-0", scope: .hub("busy"))
            try await schedule("n-4", hub: "busy")
        }
    }

    // MARK: PostgreSQL replicas

    /// Replicas a and b on one PostgreSQL outbox with a 30 s lease on `clock`, after a has made
    /// send `id` to three APNs devices and claimed all three (`first`).
    static func withClaimedByA(
        _ id: String, clock: ManualClock,
        _ body: (_ a: Outbox, _ b: Outbox, _ first: [PushItem]) async throws -> Void
    ) async throws {
        try await withOutbox(.postgres, lease: .seconds(30), now: clock.function) { fixture in
            let make = try #require(fixture.replica)
            let b = try await make("replica-b")
            try await Self.send(fixture.outbox, id, Self.targets(3), payloads: [Self.apns])
            let first = try await fixture.outbox.claim(limit: 10, platforms: [.apns])
            #expect(first.count == 3)
            try await body(fixture.outbox, b, first)
        }
    }

    @Test(
        "PostgreSQL: an expired lease goes to another replica with the same message id; the first one's late results are dropped"
    )
    func leaseTakeover() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        let clock = ManualClock()
        try await Self.withClaimedByA("n-x", clock: clock) { a, b, first in
            clock.advance(seconds: 29)
            #expect(try await b.claim(limit: 10, platforms: [.apns]).isEmpty)  // still a's
            clock.advance(seconds: 2)
            let second = try await b.claim(limit: 10, platforms: [.apns])
            #expect(second.map(\.messageID) == first.map(\.messageID) && second.allSatisfy { $0.attempt == 2 })
            // a wakes up and records: too late, its claim was taken over.
            #expect(try await a.record(first.map(Self.delivered)).isEmpty)
            var outcome = try await a.outcome(of: "n-x", scope: .everyHub)
            #expect(outcome.platforms.first?.success == 0 && outcome.platforms.first?.retries == 3)
            #expect(try await b.record(second.map(Self.delivered)).map(\.state) == [.completed])
            outcome = try await a.outcome(of: "n-x", scope: .everyHub)
            #expect(outcome.platforms.first?.success == 3 && outcome.platforms.first?.pending == 0)
            let records = try await a.deliveries(
                of: "n-x", scope: .everyHub, failedOnly: false, after: 0, limit: 10)
            #expect(records.allSatisfy { $0.attempts == 2 && $0.state == .delivered })
        }
    }

    @Test(
        "PostgreSQL: a batch's lease renewed while it is in flight is not taken over; once renewals stop, it is, and its first holder pushes none of it"
    )
    func leaseRenewal() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        let clock = ManualClock()
        try await withOutbox(.postgres, lease: .seconds(30), now: clock.function) { fixture in
            let a = fixture.outbox
            let make = try #require(fixture.replica)
            let b = try await make("replica-b")
            try await Self.send(a, "n-l", Self.targets(3), payloads: [Self.apns])
            let batch = try await a.claimBatch(limit: 10, platforms: [.apns])
            #expect(batch.items.count == 3 && batch.lease != 0 && batch.leaseEnds == clock.now + 30_000)
            #expect(a.leaseRenewalInterval == .seconds(5))
            clock.advance(seconds: 20)
            #expect(try await a.renewLeases([batch.lease]).renewed == [batch.lease])
            clock.advance(seconds: 20)  // past the claim's lease end, inside the renewed lease
            #expect(try await b.claim(limit: 10, platforms: [.apns]).isEmpty)
            #expect(try await b.renewLeases([batch.lease]).renewed.isEmpty)  // not b's to renew
            // The rows were moved on to the renewed lease's end: still a's, not due before it.
            #expect(try await b.nextDue() == clock.now + 10_000)
            clock.advance(seconds: 11)  // a stopped renewing: like a replica that died
            let second = try await b.claimBatch(limit: 10, platforms: [.apns])
            #expect(second.items.map(\.messageID) == batch.items.map(\.messageID))
            #expect(second.items.allSatisfy { $0.attempt == 2 })
            // a wakes up before pushing: it holds none of its batch any more.
            #expect(try await a.confirmLease(batch.lease, sequences: batch.items.map(\.sequence)).held.isEmpty)
            #expect(
                try await b.record(second.items.map(Self.delivered), lease: second.lease).map(\.state) == [.completed])
            #expect(try await b.renewLeases([second.lease]).renewed.isEmpty)  // recorded: its lease ended
        }
    }

    @Test("a batch whose lease ended unnoticed is renewed when nobody took it over: its holder still pushes all of it")
    func lateRenewalKeepsWhatNobodyTook() async throws {
        let clock = ManualClock()
        for backend in StoreBackend.available {
            try await withOutbox(backend, lease: .seconds(30), now: clock.function) { fixture in
                let a = fixture.outbox
                try await Self.send(a, "n-late", Self.targets(2), payloads: [Self.apns])
                let batch = try await a.claimBatch(limit: 10, platforms: [.apns])
                clock.advance(seconds: 40)  // the holder was stalled past its lease; no one claimed meanwhile
                let (held, until) = try await a.confirmLease(batch.lease, sequences: batch.items.map(\.sequence))
                #expect(held == Set(batch.items.map(\.sequence)) && until == clock.now + 30_000)
                // Renewed: a claim now moves the rows on instead of taking them.
                #expect(try await a.claim(limit: 10, platforms: [.apns]).isEmpty)
                #expect(
                    try await a.record(batch.items.map(Self.delivered), lease: batch.lease).map(\.state) == [.completed]
                )
            }
        }
    }

    @Test("PostgreSQL: a restarted replica takes its own leases back at once, not its peers'")
    func ownLeases() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        try await withOutbox(.postgres) { fixture in
            let a = fixture.outbox
            let make = try #require(fixture.replica)
            let b = try await make("replica-b")
            try await Self.send(a, "n-r", Self.targets(4), payloads: [Self.apns])
            let mine = try await a.claim(limit: 3, platforms: [.apns])
            let theirs = try await b.claim(limit: 3, platforms: [.apns])
            #expect(mine.count == 3 && theirs.count == 1)
            let restarted = try await make("replica-a")
            #expect(try await restarted.recoverLeases() == 3)
            let again = try await restarted.claim(limit: 10, platforms: [.apns])
            #expect(again.map(\.messageID) == mine.map(\.messageID) && again.allSatisfy { $0.attempt == 2 })
            #expect(try await restarted.outcome(of: "n-r", scope: .everyHub).platforms.first?.retries == 3)
        }
    }

    @Test(
        "PostgreSQL: replicas claiming and recording at once take every delivery exactly once, and the send completes once"
    )
    func concurrentReplicas() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        try await withOutbox(.postgres) { fixture in
            let make = try #require(fixture.replica)
            let replicas: [Outbox] = [
                try await make("replica-1"), try await make("replica-2"), try await make("replica-3"),
            ]
            let count = 3000
            try await Self.send(
                replicas[0], "n-c", Self.targets(count / 2) + Self.targets(count / 2, .fcm, prefix: "f"))
            // Each worker returns what it claimed and which sends its results finished.
            let (sequences, finished) = try await withThrowingTaskGroup(of: ([Int64], [OutcomeState]).self) { group in
                for worker in 0..<6 {
                    let outbox = replicas[worker % replicas.count]
                    group.addTask {
                        var claimed: [Int64] = []
                        var finished: [OutcomeState] = []
                        while true {
                            let items = try await outbox.claim(limit: 97, platforms: [.apns, .fcm])
                            if items.isEmpty { return (claimed, finished) }
                            claimed += items.map(\.sequence)
                            finished += try await outbox.record(items.map(Self.delivered)).map(\.state)
                        }
                    }
                }
                var all: ([Int64], [OutcomeState]) = ([], [])
                for try await part in group {
                    all.0 += part.0
                    all.1 += part.1
                }
                return all
            }
            #expect(sequences.count == count && Set(sequences).count == count)
            #expect(finished == [.completed])
            let outcome = try await replicas[1].outcome(of: "n-c", scope: .everyHub)
            #expect(outcome.state == .completed)
            #expect(outcome.platforms.map(\.success) == [Int64(count / 2), Int64(count / 2)])
            #expect(outcome.platforms.allSatisfy { $0.pending == 0 && $0.retries == 0 })
        }
    }

    @Test(
        "PostgreSQL: a due scheduled send is handed to one replica at a time; a restarted replica takes its own back at once"
    )
    func scheduledOnce() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        let clock = ManualClock()
        try await withOutbox(.postgres, now: clock.function) { fixture in
            let a = fixture.outbox
            let make = try #require(fixture.replica)
            let b = try await make("replica-b")
            _ = try await a.schedule(
                id: "n-d", sender: "s", targetUser: "u", targetTag: "", hub: "default", fireAt: clock.now,
                request: try SendRequest(targetUser: "u").serializedBytes(), originalBody: [], maxPending: 10)
            #expect(try await a.dueScheduled(limit: 10).map(\.id) == ["n-d"])
            #expect(try await b.dueScheduled(limit: 10).isEmpty)
            // a failed transiently and never made it: after the take runs out, another replica may.
            clock.advance(seconds: 31)
            #expect(try await b.dueScheduled(limit: 10).map(\.id) == ["n-d"])

            // a takes another and dies: its restart makes it at once, b still waits for the take to end.
            _ = try await a.schedule(
                id: "n-e", sender: "s", targetUser: "u", targetTag: "", hub: "default", fireAt: clock.now,
                request: try SendRequest(targetUser: "u").serializedBytes(), originalBody: [], maxPending: 10)
            #expect(try await a.dueScheduled(limit: 10).map(\.id) == ["n-e"])
            let restarted = try await make("replica-a")
            #expect(try await b.dueScheduled(limit: 10).isEmpty)
            _ = try await restarted.recoverLeases()
            #expect(try await restarted.dueScheduled(limit: 10).map(\.id) == ["n-e"])
            #expect(try await b.dueScheduled(limit: 10).isEmpty)
        }
    }
}
