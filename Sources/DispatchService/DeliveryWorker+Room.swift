import HeraldProto
import PushProviders

/// A hub and a platform: the key of one sender.
struct HubPlatform: Hashable {
    var hub: String
    var platform: Platform
}

/// What one hub holds of the delivery worker: batches in flight with its deliveries, how many it
/// may have (its window), and its deliveries in flight.
struct HubLoad {
    var batches = 0
    var window = 1
    var items = 0
}

extension DeliveryWorker {
    /// How many deliveries of each hub the next claim may take: at most what its
    /// `max_concurrent_pushes` leaves; of a hub with its window's batches in flight, only its
    /// personal lane (`personalOnly`, up to one batch more than its window, so that its
    /// one-person sends do not wait for its broadcast's batches), and none past that; unnamed
    /// hubs as many as the claim holds.
    func hubRoom() -> (room: [String: Int], personalOnly: Set<String>) {
        let caps = concurrency.withLock { $0 }
        return load.withLock { load in
            var room = Self.room(caps: caps, load: load)
            var personalOnly = Set<String>()
            for (hub, held) in load where held.batches >= held.window {
                if held.batches == held.window, room[hub] != 0 {
                    personalOnly.insert(hub)
                    room[hub] = min(room[hub] ?? .max, DeliveryLane.personalDevices)
                } else {
                    room[hub] = 0
                }
            }
            return (room, personalOnly)
        }
    }

    /// How many deliveries of each hub the fast lane may claim: what its `max_concurrent_pushes`
    /// leaves (its window paces its broadcasts, not its one-person sends).
    func capRoom() -> [String: Int] {
        let caps = concurrency.withLock { $0 }
        return load.withLock { Self.room(caps: caps, load: $0) }
    }

    /// What each hub's `max_concurrent_pushes` (`caps`) leaves beside its deliveries in flight.
    static func room(caps: [String: Int], load: [String: HubLoad]) -> [String: Int] {
        caps.reduce(into: [:]) { room, cap in room[cap.key] = max(0, cap.value - (load[cap.key]?.items ?? 0)) }
    }

    static func itemsPerHub(_ items: [PushItem]) -> [String: Int] {
        var counts: [String: Int] = [:]
        for item in items { counts[item.hub, default: 0] += 1 }
        return counts
    }

    /// Halves the batches `hub` may have in flight after its pushes timed out; adds one back after
    /// a batch with its pushes answered within a quarter of the push timeout.
    func adjustWindow(hub: String, timedOut: Bool, took: Duration) {
        let (before, after) = load.withLock { load -> (Int, Int) in
            var held = load[hub] ?? HubLoad()
            let before = held.window
            if timedOut {
                held.window = max(1, held.window / 2)
            } else if took < pushTimeout / 4 {
                held.window = min(workers, held.window + 1)
            }
            load[hub] = held
            return (before, held.window)
        }
        if after < before {
            logger.notice(
                "pushes timed out: fewer batches in flight",
                metadata: ["herald.hub": "\(hub)", "herald.batches": "\(after)", "herald.before": "\(before)"])
        }
    }

}
