import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import PushProviders
import Synchronization
import Testing

@testable import DispatchService

/// A claim shares its rows among hubs, and a hub's one-person sends go before its backlog.
@Suite("fair claims: hubs share each claim, one-person sends go first", .watchedForStalls)
struct FairClaimTests {
    static func send(
        _ outbox: Outbox, _ id: String, hub: String, _ count: Int, lane: DeliveryLane = .bulk,
        platform: Platform = .apns
    ) async throws {
        let payload = platform == .apns ? OutboxStoreTests.apns : OutboxStoreTests.fcm
        _ = try await outbox.enqueue(
            Outbox.Send(
                id: id, sender: "s", targetUser: "", targetTag: "t", payloads: [payload], retryWindow: .seconds(600),
                hub: hub, lane: lane), targets: OutboxStoreTests.targets(count, platform, prefix: id))
    }

    static func count(_ items: [PushItem], hub: String) -> Int { items.filter { $0.hub == hub }.count }

    @Test(
        "a hub's broadcast backlog does not stand in front of another hub's send, nor of its own one-person send",
        arguments: StoreBackend.available)
    func backlogDoesNotBlock(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "a-broadcast", hub: "a", 2000)
            try await Self.send(outbox, "b-alert", hub: "b", 1, lane: .personal)
            try await Self.send(outbox, "a-secure", hub: "a", 1, lane: .personal)
            let items = try await outbox.claim(limit: 100, platforms: [.apns])
            #expect(items.count == 100, "what b leaves goes to a")
            #expect(Set(items.map(\.sequence)).count == 100, "a's second look goes on where its share stopped")
            #expect(
                items.filter { $0.notificationID == "a-broadcast" }.map(\.registrationID)
                    == (0..<98).map { "a-broadcast-\($0)" }, "a's broadcast in order, none skipped")
            #expect(items.contains { $0.notificationID == "b-alert" }, "b's send, made after a's 2,000 rows")
            let ofA = items.filter { $0.hub == "a" }
            #expect(ofA.first?.notificationID == "a-secure", "a's one-person send before a's broadcast")
            #expect(ofA.dropFirst().allSatisfy { $0.notificationID == "a-broadcast" } && ofA.count == 99)
            // Before this issue the claim took the oldest 100: all of them a's broadcast.
        }
    }

    @Test(
        "a claim reuses the hubs the last one found, with each send's hub added and a hub with nothing due left out",
        arguments: StoreBackend.available)
    func reusedDiscovery(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            // What is found is kept for a second; on a loaded machine the steps below may take longer.
            outbox.hubLookInterval.withLock { $0 = .seconds(3600) }
            func discovery() async throws -> (hubs: [Platform: Set<String>], reused: Bool) {
                try await outbox.discoverHubs([.apns], after: outbox.claimCursor.withLock { $0 }, outbox.sql)
            }
            try await Self.send(outbox, "a-broadcast", hub: "a", 300)
            #expect(try await outbox.claim(limit: 100, platforms: [.apns]).count == 100)
            var found = try await discovery()
            #expect(found.reused && found.hubs == [.apns: ["a"]], "the broadcast's next claims look for no hubs")
            try await Self.send(outbox, "b-alert", hub: "b", 1, lane: .personal)
            found = try await discovery()
            #expect(found.reused && found.hubs == [.apns: ["a", "b"]], "a send adds its hub")
            let items = try await outbox.claim(limit: 100, platforms: [.apns])
            #expect(items.contains { $0.notificationID == "b-alert" })
        }
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            outbox.hubLookInterval.withLock { $0 = .seconds(3600) }
            // A hub whose rows are all claimed (leased: still pending, not due) stays: its rows come
            // due again if their lease ends. One with no pending rows left is left out by the claim
            // that finds so.
            try await Self.send(outbox, "c-few", hub: "c", 5)
            #expect(try await outbox.claim(limit: 10, platforms: [.apns]).count == 5)
            #expect(try await outbox.claim(limit: 10, platforms: [.apns]).isEmpty)
            #expect(try await outbox.discoverHubs([.apns], after: "", outbox.sql).hubs == [.apns: ["c"]])
            _ = try await outbox.deleteEverything()
            #expect(try await outbox.claim(limit: 10, platforms: [.apns]).isEmpty)
            let found = try await outbox.discoverHubs([.apns], after: "", outbox.sql)
            #expect(found.reused && found.hubs.isEmpty)
        }
        // Another replica's send arrives as its NOTIFY's payload.
        let notice = HubDiscovery.notice(hub: "b", platforms: [.fcm, .apns])
        #expect(HubDiscovery.parse(notice: notice)?.hub == "b")
        #expect(Set(HubDiscovery.parse(notice: notice)?.platforms ?? []) == [.apns, .fcm])
        for bad in ["", "b", "b:", "b:x", ":1", String(repeating: "h", count: 400) + ":1"] {
            #expect(HubDiscovery.parse(notice: bad) == nil, "\(bad.prefix(20))")
        }
    }

    @Test(
        "two hubs with backlogs share each claim equally, on every platform it claims",
        arguments: StoreBackend.available)
    func equalShares(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "a-1", hub: "a", 500)
            try await Self.send(outbox, "b-1", hub: "b", 300, platform: .fcm)
            try await Self.send(outbox, "b-2", hub: "b", 200)
            for _ in 0..<3 {
                let items = try await outbox.claim(limit: 100, platforms: [.apns, .fcm])
                #expect(Self.count(items, hub: "a") == 50 && Self.count(items, hub: "b") == 50)
                // Within b, the oldest first across its platforms: b-1's FCM rows were made first.
                #expect(items.filter { $0.hub == "b" }.allSatisfy { $0.notificationID == "b-1" })
            }
        }
    }

    @Test(
        "a hub's weight sets its share of each claim; what it leaves goes to the others; it reaches other replicas",
        arguments: StoreBackend.available)
    func weights(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "a-1", hub: "a", 1000)
            try await Self.send(outbox, "b-1", hub: "b", 1000)
            try await Self.send(outbox, "c-1", hub: "c", 10)
            try await outbox.setPushLimits(HubPushLimit(weight: 3), hub: "a")
            var items = try await outbox.claim(limit: 100, platforms: [.apns])
            // a 3/5, b 1/5, c 1/5 of 100; c has 10, and its other 10 go to a and b by weight: 8 and 2
            // (7.5 and 2.5, the rounding's row to the first).
            #expect(Self.count(items, hub: "a") == 68 && Self.count(items, hub: "b") == 22)
            #expect(Self.count(items, hub: "c") == 10)
            items = try await outbox.claim(limit: 100, platforms: [.apns])
            #expect(Self.count(items, hub: "a") == 75 && Self.count(items, hub: "b") == 25, "3:1 once c is done")
            #expect(try await outbox.pushLimits(hub: "a").limits.weight == 3)

            // Weight 1 is the default: no row is kept for it.
            try await outbox.setPushLimits(HubPushLimit(weight: 1), hub: "a")
            #expect(try await outbox.pushLimits(hub: "a").limits == HubPushLimit())
            items = try await outbox.claim(limit: 100, platforms: [.apns])
            #expect(Self.count(items, hub: "a") == 50 && Self.count(items, hub: "b") == 50)
            await #expect(throws: ServiceError.self) {
                try await outbox.setPushLimits(HubPushLimit(weight: 101), hub: "a")
            }
            await #expect(throws: ServiceError.self) {
                try await outbox.setPushLimits(HubPushLimit(weight: -1), hub: "a")
            }

            // Set through another process (another replica, or before a restart): read back with the caps.
            try await outbox.sql.execute(
                "INSERT INTO hub_push_limit (hub, pushes_per_day, pushes_per_month, max_concurrent, weight) VALUES ('b', 0, 0, 0, 4)"
            )
            #expect(try await outbox.reloadClaimLimits().isEmpty, "no concurrency cap set")
            items = try await outbox.claim(limit: 100, platforms: [.apns])
            // 1:4 of 100 with c's 1/6 left over (16.7 each way): a 17 + 4, b 67 + 12.
            #expect(Self.count(items, hub: "a") == 21 && Self.count(items, hub: "b") == 79)
        }
    }

    @Test(
        "a hub at its window still has its one-person sends claimed, and nothing of its broadcast",
        arguments: StoreBackend.available)
    func personalOnly(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await Self.send(outbox, "a-broadcast", hub: "a", 1000)
            try await Self.send(outbox, "b-1", hub: "b", 1000)
            var items = try await outbox.claimBatch(
                limit: 100, platforms: [.apns], room: ["a": 100], personalOnly: ["a"]
            ).items
            #expect(Self.count(items, hub: "a") == 0 && Self.count(items, hub: "b") == 100, "no personal row of a yet")
            try await Self.send(outbox, "a-secure", hub: "a", 2, lane: .personal)
            items = try await outbox.claimBatch(limit: 100, platforms: [.apns], room: ["a": 100], personalOnly: ["a"])
                .items
            #expect(items.filter { $0.hub == "a" }.map(\.notificationID) == ["a-secure", "a-secure"])
            #expect(Self.count(items, hub: "b") == 98)
            // Its room still holds: 1 row of the personal lane.
            try await Self.send(outbox, "a-secure-2", hub: "a", 3, lane: .personal)
            items = try await outbox.claimBatch(limit: 100, platforms: [.apns], room: ["a": 1], personalOnly: ["a"])
                .items
            #expect(items.filter { $0.hub == "a" }.map(\.notificationID) == ["a-secure-2"])
        }
    }

    @Test(
        "the fast lane's claim: every hub's one-person sends, none of their broadcasts; the hubs' rotation and what the claims know stay",
        arguments: StoreBackend.available)
    func onlyPersonal(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            outbox.hubLookInterval.withLock { $0 = .seconds(3600) }
            try await Self.send(outbox, "a-broadcast", hub: "a", 100)
            try await Self.send(outbox, "b-broadcast", hub: "b", 100)
            try await Self.send(outbox, "c-broadcast", hub: "c", 100)
            _ = try await outbox.claim(limit: 3, platforms: [.apns])
            let cursor = outbox.claimCursor.withLock { $0 }
            #expect(try await outbox.claimBatch(limit: 100, platforms: [.apns], onlyPersonal: true).items.isEmpty)
            try await Self.send(outbox, "b-alert", hub: "b", 1, lane: .personal)
            try await Self.send(outbox, "c-alert", hub: "c", 2, lane: .personal)
            let items = try await outbox.claimBatch(limit: 100, platforms: [.apns], onlyPersonal: true).items
            #expect(items.map(\.notificationID).sorted() == ["b-alert", "c-alert", "c-alert"])
            #expect(outbox.claimCursor.withLock { $0 } == cursor)
            // Hub a had nothing personal: it is still known, and its broadcast claimed next.
            let kept = outbox.discovered.withLock { $0[[.apns]]?.hubs[.apns] }
            #expect(kept == ["a", "b", "c"])
        }
    }

    @Test(
        "PostgreSQL: a one-person send is pushed while the worker's claim of its hub's broadcast waits (the fast lane)")
    func fastLane() async throws {
        guard StoreBackend.available.contains(.postgres) else { return }
        try await withOutbox(.postgres) { fixture in
            let outbox = fixture.outbox
            // The default hub's: the recorder is the default hub's sender.
            try await Self.send(outbox, "a-broadcast", hub: Names.defaultHub, 50)
            let recorder = RecordingSender()
            let worker = DeliveryWorker(
                outbox: outbox,
                senders: HubSenders(
                    defaults: [.apns: recorder], inbox: fixture.inbox, client: nil, timeout: .seconds(1)),
                registrations: RegistrationServiceClient(try RPCClient(socketPath: "/nonexistent")),
                policy: RetryPolicy(), logger: Logger(label: "test"))
            let running = Mutex<Task<Void, any Error>?>(nil)
            defer { running.withLock { $0?.cancel() } }
            try await fixture.db.transaction { session in
                // The broadcast's send row, held: the worker's claim of its rows waits to mark it
                // processing, as a claim of 500 rows on a busy server takes its time.
                _ = try await session.query("SELECT id FROM notification WHERE id = 'a-broadcast' FOR UPDATE")
                running.withLock { $0 = Task.detached { try await worker.run() } }
                let waits = try await eventually {
                    // The statistics views keep one snapshot per transaction unless it is cleared.
                    _ = try await session.query("SELECT pg_stat_clear_snapshot()")
                    return try await session.queryFirst(
                        "SELECT 1 FROM pg_stat_activity WHERE pg_backend_pid() = ANY (pg_blocking_pids(pid))") != nil
                }
                #expect(waits, "the worker's claim waits for the broadcast's row")
                try await Self.send(outbox, "b-alert", hub: Names.defaultHub, 1, lane: .personal)
                worker.wake()
                #expect(
                    try await eventually { recorder.sent.withLock { $0.contains("b-alert") } },
                    "pushed while that claim waits")
                #expect(recorder.sent.withLock { !$0.contains("a-broadcast") })
            }
            #expect(
                try await eventually { recorder.sent.withLock { $0.filter { $0 == "a-broadcast" }.count } == 50 },
                "the broadcast once its row is free")
        }
    }

    @Test("shares: in proportion to weights, at least one row each, no overflow")
    func shares() {
        #expect(FairClaims.shares(of: ["a", "b"], limit: 100, weights: [:]) == [50, 50])
        #expect(FairClaims.shares(of: ["a", "b"], limit: 100, weights: ["b": 100]) == [1, 99])
        #expect(FairClaims.shares(of: ["a", "b"], limit: 3, weights: ["a": 100]) == [3, 1], "at least one each")
        #expect(FairClaims.shares(of: ["a", "b", "c"], limit: 100, weights: [:]) == [34, 33, 33], "adds up")
        #expect(FairClaims.shares(of: ["a"], limit: .max, weights: ["a": 100]) == [1 << 40])
        #expect(FairClaims.shares(of: ["a", "b"], limit: 10, weights: ["a": -5, "b": .max]) == [1, 9])
        #expect(FairClaims.shares(of: ["a", "b"], limit: -3, weights: [:]) == [1, 1])
        #expect(FairClaims.shares(of: [], limit: 10, weights: [:]) == [])
    }

    @Test(
        "with more hubs than a claim serves, each is served within a few claims: none starves",
        arguments: StoreBackend.available)
    func noStarvation(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            let hubs = (0..<40).map { "hub-\($0 < 10 ? "0" : "")\($0)" }
            for hub in hubs { try await Self.send(outbox, "n-\(hub)", hub: hub, 10) }
            var served = Set<String>()
            for _ in 0..<3 {
                let items = try await outbox.claim(limit: 32, platforms: [.apns])
                #expect(Set(items.map(\.hub)).count == FairClaims.maxHubs, "two rows of each of 16 hubs")
                served.formUnion(items.map(\.hub))
            }
            #expect(served == Set(hubs), "40 hubs, 16 a claim: all within 3 claims")
            #expect(try await outbox.nextDue() != nil)
        }
    }

    @Test(
        "each hub's queue for the metrics: pending deliveries, and how long its oldest due one has waited",
        arguments: StoreBackend.available)
    func hubQueues(_ backend: StoreBackend) async throws {
        let start = unixMillis() - 60_000
        let clock = Mutex(start)
        try await withOutbox(backend, now: { clock.withLock { $0 } }) { fixture in
            let outbox = fixture.outbox
            #expect(try await outbox.hubQueues().isEmpty)
            try await Self.send(outbox, "a-1", hub: "a", 30)
            clock.withLock { $0 += 2000 }
            try await Self.send(outbox, "b-1", hub: "b", 5, lane: .personal, platform: .fcm)
            clock.withLock { $0 += 3000 }
            #expect(
                try await outbox.hubQueues()
                    == [
                        HubQueue(hub: "a", pending: 30, oldestDue: 5000),
                        HubQueue(hub: "b", pending: 5, oldestDue: 3000),
                    ])
            // One hub's, as GetHubQueue reads it for the console.
            #expect(try await outbox.hubQueue(hub: "b") == HubQueue(hub: "b", pending: 5, oldestDue: 3000))
            #expect(try await outbox.hubQueue(hub: "c") == HubQueue(hub: "c", pending: 0, oldestDue: 0))
            // Claimed (leased): pending still, but nothing of b's is due until its lease ends.
            _ = try await outbox.claim(limit: 100, platforms: [.apns, .fcm])
            #expect(
                try await outbox.hubQueues()
                    == [HubQueue(hub: "a", pending: 30, oldestDue: 0), HubQueue(hub: "b", pending: 5, oldestDue: 0)])
            #expect(try await outbox.hubQueue(hub: "a") == HubQueue(hub: "a", pending: 30, oldestDue: 0))
        }
    }

    @Test("SQLite: a claim reads its hubs by a loose scan and each lane as one ordered range: no scan, no sort")
    func claimPlan() throws {
        let db = try SQLiteDatabase.inMemory()
        _ = try Outbox(db: db)
        let plans = try db.writer.read { db in
            let (due, values) = Outbox.due(.apns, hub: "a", lane: .bulk, at: 0, limit: 10).render(.sqlite)
            #expect(values.count == 5, "the pending state is in the text, where the planner sees it")
            let (hubs, hubValues) = Outbox.hubsWithPending(.apns, after: "", limit: 16).render(.sqlite)
            let (onward, _) = Outbox.due(.apns, hub: "a", lane: .bulk, at: 0, limit: 10, after: (0, 0)).render(.sqlite)
            #expect(
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + onward, arguments: [1, "a", 1, 0, 0, 0, 10])
                    .map { $0["detail"] as String }.allSatisfy {
                        !$0.contains("TEMP B-TREE") && $0.contains("delivery_due")
                    },
                "a second look goes on along the index, in its order")
            return (
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + due, arguments: [1, "a", 1, 0, 10])
                    .map { $0["detail"] as String },
                try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + hubs, arguments: [1, "", 1])
                    .map { $0["detail"] as String },
                hubValues.count
            )
        }
        #expect(plans.2 == 3, "platform, cursor, platform")
        #expect(
            plans.0 == [
                "SEARCH delivery USING INDEX delivery_due (platform=? AND hub=? AND lane=? AND next_attempt_at<?)"
            ])
        let searches = plans.1.filter { $0.contains("delivery") }
        #expect(
            // min() over an index range reads its first entry: one look-up per hub (13 µs for 300,000
            // rows of one hub, measured with Python's sqlite3).
            searches.count == 2
                && searches.allSatisfy { $0.contains("USING INDEX delivery_due (platform=? AND hub>?)") },
            "\(plans.1)")
    }

    @Test("a file from before fair claims (outbox-v15): its pending deliveries take their send's hub and the bulk lane")
    func migration() async throws {
        let queue = try DatabaseQueue(configuration: HeraldDatabase.configuration)
        try SQLiteDatabase.migrator(for: DispatchSchema.schema).migrate(queue, upTo: "outbox-v15-batch-leases")
        try await queue.write { db in
            try db.execute(
                sql: """
                    INSERT INTO notification (id, sender, target_user, target_tag, state, created_at, updated_at, hub)
                    VALUES ('n', 's', 'u', '', 2, 0, 0, 'tenant');
                    INSERT INTO outbox_payload (notification_id, platform, body, collapse_id, expires_at_ms)
                    VALUES ('n', 1, x'7b7d', '', 0);
                    INSERT INTO notification_platform (notification_id, platform, success, failure, pending) VALUES ('n', 1, 1, 0, 1);
                    INSERT INTO delivery (notification_id, registration_id, platform, handle, message_id, state,
                                          attempts, next_attempt_at, give_up_at, updated_at)
                    VALUES ('n', 'r-0', 1, 'h0', 'm-0', 2, 1, 0, 9999999999999, 0),
                           ('n', 'r-1', 1, 'h1', 'm-1', 1, 0, 0, 9999999999999, 0);
                    """)
        }
        let outbox = try Outbox(db: SQLiteDatabase(queue))
        let rows = try await queue.read {
            try Row.fetchAll($0, sql: "SELECT hub, lane FROM delivery ORDER BY sequence")
        }
        #expect(rows.map { $0[0] as String } == ["default", "tenant"], "only the pending row is rewritten")
        #expect(rows.map { $0[1] as Int } == [1, 1])
        let items = try await outbox.claim(limit: 10, platforms: [.apns])
        #expect(items.map(\.messageID) == ["m-1"] && items.map(\.hub) == ["tenant"])
    }

    @Test("the lane: one user, one device, one installation or user tag is personal; the rest bulk")
    func lanes() {
        func lane(_ edit: (inout SendRequest) -> Void, devices: Int = 1) -> DeliveryLane {
            var request = SendRequest()
            edit(&request)
            return DeliveryLane.of(request, devices: devices)
        }
        #expect(lane { $0.targetUser = "alice" } == .personal)
        #expect(lane({ $0.targetUser = "alice" }, devices: 101) == .bulk, "more devices than a person's")
        #expect(lane { $0.deviceHandles = ["h1"] } == .personal)
        #expect(lane({ $0.deviceHandles = ["h1", "h2"] }, devices: 2) == .bulk)
        #expect(lane { $0.targetTag = "$InstallationId:{i-1}" } == .personal)
        #expect(lane { $0.targetTag = "$UserId:{bob}" } == .personal)
        #expect(lane { $0.targetTag = "username:bob" } == .personal)
        #expect(lane { $0.targetTag = "$UserId:{bob} || sports" } == .bulk)
        #expect(lane { $0.targetTag = "sports" } == .bulk)
        #expect(lane { $0.targetTag = "username:" } == .bulk)
        #expect(lane { $0.broadcast = true } == .bulk)
    }
}

/// A provider that answers every push with 200 and keeps each push's send id.
final class RecordingSender: PushSender {
    let sent = Mutex<[String]>([])

    func send(_ items: [PushItem]) async -> [PushResult] {
        sent.withLock { $0 += items.map(\.notificationID) }
        return items.map { _ in .delivered(status: 200) }
    }
}
