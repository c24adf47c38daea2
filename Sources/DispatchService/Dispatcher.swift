import Foundation
public import HeraldModel
public import HeraldProto
public import HeraldRPC
public import HeraldService
import Metrics
import Synchronization

/// Resolves a send's audience through one StreamAudience call and commits the send with one
/// outbox delivery per device (``Outbox``) before answering; ``DeliveryWorker`` delivers them.
public final class Dispatcher: Sendable {
    private let outbox: Outbox
    private let registrations: any RegistrationServiceClientProtocol
    /// Deliveries still failing this long after the send are abandoned.
    private let retryWindow: Duration
    /// Deadline of the audience stream of one send (large audiences take a while).
    private let audienceTimeout: Duration
    /// Called after each committed send, to wake the delivery workers.
    private let onEnqueue: @Sendable () -> Void

    public init(
        outbox: Outbox, registrations: any RegistrationServiceClientProtocol, retryWindow: Duration = .seconds(1800),
        audienceTimeout: Duration = .seconds(600), onEnqueue: @escaping @Sendable () -> Void = {}
    ) {
        self.outbox = outbox
        self.registrations = registrations
        self.retryWindow = retryWindow
        self.audienceTimeout = audienceTimeout
        self.onEnqueue = onEnqueue
    }

    public func send(_ request: SendRequest, context: RPCContext) async throws -> Outcome {
        let direct = !request.deviceHandles.isEmpty
        guard [!request.targetUser.isEmpty, !request.targetTag.isEmpty, request.broadcast, direct].filter({ $0 }).count == 1 else {
            throw ServiceError.invalidArgument("set exactly one of target_user, target_tag, broadcast and device_handles")
        }
        guard !request.payloads.isEmpty else { throw ServiceError.invalidArgument("at least one payload is required") }
        guard request.maxDevices >= 0 else { throw ServiceError.invalidArgument("max_devices must not be negative") }
        let sentAt = unixMillis()
        var prepared: [Platform: OutboxPayload] = [:]
        for payload in request.payloads {
            guard prepared[payload.platform] == nil else {
                throw ServiceError.invalidArgument("two payloads for \(payload.platform)")
            }
            prepared[payload.platform] = try PlatformRules.prepare(payload, sentAt: sentAt)
        }
        let tag = request.targetUser.isEmpty ? request.targetTag : "username:\(request.targetUser)"
        if !request.targetTag.isEmpty {
            // Refused here, before anything is read, with the position of the error.
            _ = try TagExpression.validated(request.targetTag, field: "target_tag")
        }
        let id = Self.newNotificationID()
        var logger = context.logger
        logger[metadataKey: "herald.notification_id"] = "\(id)"

        // The whole audience is read before anything is committed: a send is all or nothing.
        let targets = Mutex<[Outbox.Target]>([])
        let onlyPlatform = prepared.count == 1 ? prepared.keys.first! : Platform.unspecified
        if direct {
            guard onlyPlatform != .unspecified else {
                throw ServiceError.invalidArgument("a send to device_handles takes exactly one payload, for the handles' platform")
            }
            guard request.deviceHandles.count <= Self.maxDirectHandles else {
                throw ServiceError.invalidArgument(
                    "at most \(Self.maxDirectHandles) device handles per send, got \(request.deviceHandles.count)")
            }
            // herald-registration holds the rules and the allowed push hosts for every handle.
            _ = try await registrations.checkHandles(
                CheckHandlesRequest(platform: onlyPlatform, handles: request.deviceHandles), requestID: context.requestID)
            // The same handle twice is one device (Notification Hubs delivers at most once per handle).
            var seen = Set<String>()
            targets.withLock { list in
                for handle in request.deviceHandles where seen.insert(handle).inserted {
                    list.append(Outbox.Target(registrationID: "", platform: onlyPlatform, handle: handle))
                }
            }
        } else {
            try await registrations.streamAudience(
                StreamAudienceRequest(tag: tag, platform: onlyPlatform, hub: request.hub, broadcast: request.broadcast),
                requestID: context.requestID,
                timeout: audienceTimeout
            ) { [prepared] batch in
                let found = batch.registrations.compactMap { registration -> Outbox.Target? in
                    guard prepared[registration.platform] != nil else { return nil }
                    return Outbox.Target(
                        registrationID: registration.registrationID, platform: registration.platform, handle: registration.handle)
                }
                targets.withLock { $0.append(contentsOf: found) }
            }
        }
        var audience = targets.withLock { $0 }
        if request.maxDevices > 0, audience.count > request.maxDevices { audience.removeLast(audience.count - Int(request.maxDevices)) }
        let (state, created) = try await outbox.enqueue(
            id: id, sender: request.sender, targetUser: request.targetUser, targetTag: request.targetTag,
            payloads: Array(prepared.values), targets: audience, retryWindow: retryWindow, hub: Names.hub(request.hub))
        if state == .noTargetFound {
            DispatchMetrics.sendFinished(state)
        } else {
            onEnqueue()
        }
        logger.info("enqueued", metadata: ["herald.deliveries": "\(audience.count)", "herald.state": "\(state)"])
        var counts: [Platform: PlatformOutcome] = [:]
        for target in audience { counts[target.platform, default: PlatformOutcome(platform: target.platform)].pending += 1 }
        return Outcome(
            notificationID: id, state: state, platforms: counts.values.sorted { $0.platform.rawValue < $1.platform.rawValue },
            createdAtUnixMs: created, sender: request.sender, hub: Names.hub(request.hub), finishedAtUnixMs: audience.isEmpty ? created : 0)
    }

    /// Handles one direct send may name (Notification Hubs' batch limit).
    static let maxDirectHandles = 1000

    /// "n-" and 32 hex characters (128 random bits).
    static func newNotificationID() -> String {
        "n-" + randomHex(words: 2)
    }
}
