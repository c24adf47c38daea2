import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import PushProviders
import Synchronization
import Testing

@testable import DispatchService

/// A hub's push quotas hold in the send's own commit, and a claim takes no more of a hub
/// than the delivery worker leaves it room for.
@Suite("push quotas and per-hub room in claims", .watchedForStalls)
struct PushQuotaTests {
    @Test("a UTC day and month as the counters' keys, for any instant of the clock")
    func periods() {
        #expect(HubPushLimit.periods(at: 0) == ("d1970-01-01", "m1970-01"))
        // 2026-11-28T23:59:59.999Z and the next millisecond.
        #expect(HubPushLimit.periods(at: 1_795_910_399_999) == ("d2026-11-28", "m2026-11"))
        #expect(HubPushLimit.periods(at: 1_795_910_400_000) == ("d2026-11-29", "m2026-11"))
        // A leap day, and the turn of a year.
        #expect(HubPushLimit.periods(at: 1_709_164_800_000) == ("d2024-02-29", "m2024-02"))
        #expect(HubPushLimit.periods(at: 1_767_225_600_000 - 1) == ("d2025-12-31", "m2025-12"))
        #expect(HubPushLimit.periods(at: -1) == ("d1969-12-31", "m1969-12"))
        // Hostile clocks do not trap.
        _ = HubPushLimit.periods(at: .max)
        _ = HubPushLimit.periods(at: .min)
    }

    @Test(
        "a send that would pass a hub's quota is refused whole, and another hub's is not counted",
        arguments: StoreBackend.available)
    func quota(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await outbox.setPushLimits(HubPushLimit(perMonth: 10), hub: "a")
            try await FairClaimTests.send(outbox, "a-1", hub: "a", 6)
            let refused = await #expect(throws: ServiceError.self) {
                try await FairClaimTests.send(outbox, "a-2", hub: "a", 5)
            }
            #expect(refused?.isQuotaExceeded == true && refused?.message.hasPrefix("QuotaExceeded") == true)
            let written: Int64 =
                try await outbox.sql.queryFirst("SELECT count(*) FROM delivery WHERE notification_id = 'a-2'").map {
                    try $0[0]
                } ?? -1
            #expect(written == 0, "nothing of the refused send was written")
            #expect(try await outbox.sql.queryFirst("SELECT 1 FROM notification WHERE id = 'a-2'") == nil)
            try await FairClaimTests.send(outbox, "a-3", hub: "a", 4)
            let used = try await outbox.pushLimits(hub: "a")
            #expect(used.limits.perMonth == 10 && used.thisMonth == 10 && used.today == 0, "no day quota: not counted")
            await #expect(throws: ServiceError.self) { try await FairClaimTests.send(outbox, "a-4", hub: "a", 1) }
            // Another hub, without a quota, sends as it likes and is not counted.
            try await FairClaimTests.send(outbox, "b-1", hub: "b", 50)
            let b = try await outbox.pushLimits(hub: "b")
            #expect(b.limits == HubPushLimit() && b.today == 0 && b.thisMonth == 0)

            // A day quota counts beside the month's; raising a limit lets the next send through.
            try await outbox.setPushLimits(HubPushLimit(perDay: 3, perMonth: 100), hub: "a")
            await #expect(throws: ServiceError.self) { try await FairClaimTests.send(outbox, "a-5", hub: "a", 4) }
            try await FairClaimTests.send(outbox, "a-6", hub: "a", 3)
            let after = try await outbox.pushLimits(hub: "a")
            #expect(after.today == 3 && after.thisMonth == 13)

            // Limits of 0 remove the row; a deleted hub takes its counters along.
            try await outbox.setPushLimits(HubPushLimit(), hub: "a")
            try await FairClaimTests.send(outbox, "a-7", hub: "a", 20)
            try await outbox.deletePushLimits(hub: "a")
            let gone = try await outbox.pushLimits(hub: "a")
            #expect(gone.limits == HubPushLimit() && gone.today == 0 && gone.thisMonth == 0)
            await #expect(throws: ServiceError.self) {
                try await outbox.setPushLimits(HubPushLimit(perDay: -1), hub: "a")
            }
        }
    }

    @Test("a claim takes at most each named hub's room, and none of a hub with none", arguments: StoreBackend.available)
    func room(_ backend: StoreBackend) async throws {
        try await withOutbox(backend) { fixture in
            let outbox = fixture.outbox
            try await FairClaimTests.send(outbox, "a-1", hub: "a", 300)
            try await FairClaimTests.send(outbox, "b-1", hub: "b", 300)
            try await FairClaimTests.send(outbox, "c-1", hub: "c", 300)
            let held = try await outbox.claimBatch(limit: 100, platforms: [.apns], room: ["a": 0, "b": 7])
            #expect(FairClaimTests.count(held.items, hub: "a") == 0, "a is held back")
            #expect(FairClaimTests.count(held.items, hub: "b") == 7, "b has room for 7")
            #expect(FairClaimTests.count(held.items, hub: "c") == 93, "c takes what the others leave")
            let onlyA = try await outbox.claimBatch(limit: 100, platforms: [.apns], room: ["b": 0, "c": 0])
            #expect(onlyA.items.count == 100 && onlyA.items.allSatisfy { $0.hub == "a" })
            let none = try await outbox.claimBatch(limit: 100, platforms: [.apns], room: ["a": 0, "b": 0, "c": 0])
            #expect(none.items.isEmpty && none.lease == 0, "every hub held back: nothing claimed, no lease")
        }
    }
}
