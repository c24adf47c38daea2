import Foundation
import HeraldModel
public import HeraldProto

/// Erase, dispatch's part, on both stores (see EraseUser and EraseDevices in dispatch.proto).
///
/// Sends: a scheduled send whose only target is the user is cancelled; the user's name goes from
/// every send as sender and as target; a finished send to the user alone loses its payloads and
/// the body NH's telemetry keeps. A send still being delivered keeps its payloads until it
/// finishes (the caller runs this step again at the end of an erase) or the retention purges it.
///
/// Devices: a delivery to one not yet attempted fails with reason "Erased", through the same
/// recording as a push service's answer, so the send's counters and state stay right; every
/// delivery to them keeps its state with registration id and handle blanked; their inbox entries,
/// staged audience rows and handle removals are deleted. A delivery in flight (leased) is left
/// alone and counted: the caller asks again once its result is in.
///
/// The delivery table has no index on registration id (one would cost every send's fan-out), so
/// each page scans it: an erase is rare, and the outbox holds what its retention keeps.
public struct ErasedRows: Sendable, Equatable {
    public var removed: Int64 = 0
    public var redacted: Int64 = 0
    /// Deliveries to the devices still in flight: the page must be asked again.
    public var inFlight: Int64 = 0

    public init(removed: Int64 = 0, redacted: Int64 = 0, inFlight: Int64 = 0) {
        self.removed = removed
        self.redacted = redacted
        self.inFlight = inFlight
    }
}

enum OutboxErasure {
    static let reason = "Erased"
    static let maxDevices = 1000

    static func tags(of user: String) -> [String] { Names.userSystemTags(of: user) }

    static func decisions(
        _ rows: [(sequence: Int64, notificationID: String, platform: Platform, attempt: Int)], at: Int64
    )
        -> [Outbox.Decision]
    {
        rows.map {
            Outbox.Decision(
                sequence: $0.sequence, notificationID: $0.notificationID, platform: $0.platform, state: .failed,
                status: 0, reason: reason, nextAttemptAt: at, removal: nil, attempt: $0.attempt)
        }
    }
}

/// One send a user made or that was addressed to them: an export's row.
public struct SendRecord: Sendable {
    public var id: String
    public var hub: String
    public var sender: String
    public var targetUser: String
    public var targetTag: String
    public var state: OutcomeState
    public var createdAt: Int64
    public var finishedAt: Int64
}

/// One delivery record to one of a user's devices: an export's row.
public struct DeviceDelivery: Sendable {
    public var sequence: Int64
    public var notificationID: String
    public var registrationID: String
    public var platform: Platform
    public var handle: String
    public var state: DeliveryState
    public var attempts: Int32
    public var lastStatus: Int32
    public var reason: String
    public var updatedAt: Int64
}
