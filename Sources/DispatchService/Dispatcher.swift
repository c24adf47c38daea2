import Foundation
import HeraldModel
public import HeraldProto
public import HeraldRPC
import HeraldService
import HeraldTelemetry
import Logging
import Metrics
import NotificationHubs
import PushProviders
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
    /// Devices of one send held in memory before the rest is staged (`audience-memory-rows`).
    private let audienceMemoryRows: Int
    /// Scheduled sends one hub may have waiting (`max-scheduled-per-hub`).
    private let maxScheduledPerHub: Int

    public init(
        outbox: Outbox, registrations: any RegistrationServiceClientProtocol,
        retryWindow: Duration = .seconds(1800),
        audienceTimeout: Duration = .seconds(600), audienceMemoryRows: Int = Outbox.StagedAudience.spillThreshold,
        maxScheduledPerHub: Int = DispatchConfig.defaultMaxScheduledPerHub,
        onEnqueue: @escaping @Sendable () -> Void = {}
    ) {
        self.maxScheduledPerHub = maxScheduledPerHub
        self.outbox = outbox
        self.registrations = registrations
        self.retryWindow = retryWindow
        self.audienceTimeout = audienceTimeout
        self.audienceMemoryRows = max(1, audienceMemoryRows)
        self.onEnqueue = onEnqueue
    }

    public func send(_ request: SendRequest, context: RPCContext) async throws -> Outcome {
        let direct = !request.deviceHandles.isEmpty
        guard
            [!request.targetUser.isEmpty, !request.targetTag.isEmpty, request.broadcast, direct].filter({ $0 }).count
                == 1
        else {
            throw ServiceError.invalidArgument(
                "set exactly one of target_user, target_tag, broadcast and device_handles")
        }
        guard request.maxDevices >= 0 else { throw ServiceError.invalidArgument("max_devices must not be negative") }
        _ = try request.storedSender()
        guard request.originalBody.count <= Self.maxOriginalBody else {
            throw ServiceError.invalidArgument(
                "original_body is \(request.originalBody.count) bytes; at most \(Self.maxOriginalBody)")
        }
        if !request.targetTag.isEmpty {
            // Refused here, before anything is read, with the position of the error.
            _ = try TagExpression.validated(request.targetTag, field: "target_tag")
        }
        if request.templateSend {
            guard request.payloads.isEmpty, !direct else {
                throw ServiceError.invalidArgument(
                    "a template send has no payloads and no device_handles: installations' templates make them")
            }
        } else {
            // Checked now, also for a scheduled send, so that a bad payload is refused to its sender.
            _ = try Self.prepare(request.payloads, sentAt: unixMillis())
        }
        let id = Self.newNotificationID()
        var logger = context.logger
        logger[metadataKey: "herald.notification_id"] = "\(id)"

        let now = unixMillis()
        guard request.scheduledAtUnixMs > now else {
            // Not scheduled: make returns nil only for a scheduled send someone else made or cancelled.
            guard
                let made = try await make(
                    request, id: id, scheduled: false, requestID: context.requestID, logger: logger)
            else { throw ServiceError(.internal, "send \(id) was not made") }
            return made
        }
        guard request.scheduledAtUnixMs <= now + Self.maxScheduleAhead.wholeMilliseconds else {
            throw ServiceError.invalidArgument("a send can be scheduled at most 7 days ahead")
        }
        if direct { try await checkHandles(request, requestID: context.requestID) }
        let sender = try request.storedSender()
        let created = try await outbox.schedule(
            id: id, sender: sender, targetUser: request.targetUser, targetTag: request.targetTag,
            hub: Names.hub(request.hub),
            fireAt: request.scheduledAtUnixMs, request: try request.serializedBytes(),
            originalBody: request.originalBody,
            maxPending: maxScheduledPerHub)
        logger.info("scheduled", metadata: ["herald.fire_at_unix_ms": "\(request.scheduledAtUnixMs)"])
        return Outcome(
            notificationID: id, state: .scheduled, createdAtUnixMs: created,
            sender: Principal.legacySender(stored: sender), hub: Names.hub(request.hub),
            principal: Principal(stored: sender))
    }

    /// Makes the scheduled sends that are due, earliest first (the scheduler's tick). A send whose
    /// stored request can no longer be made (its payload or target refused, its hub's quota spent,
    /// or any failure that is not ``transient``) is abandoned; a transient one (herald-registration unreachable) leaves
    /// it due for the next tick.
    public func fireDueScheduled(logger: Logger) async throws {
        while true {
            let due = try await outbox.dueScheduled(limit: 100)
            for (id, fireAt, bytes) in due {
                var logger = logger
                logger[metadataKey: "herald.notification_id"] = "\(id)"
                do {
                    let request = try SendRequest(serializedBytes: bytes)
                    if try await make(request, id: id, scheduled: true, requestID: newRequestID(), logger: logger)
                        != nil
                    {
                        DispatchMetrics.scheduledFired(lateness: .milliseconds(max(0, unixMillis() - fireAt)))
                    }
                } catch let error as ServiceError where !Self.transient.contains(error.code) || error.isQuotaExceeded {
                    // Abandoned rather than retried: a send that fails this way every tick would
                    // hold up every scheduled send due after it. A spent quota too: NH drops
                    // what is over it, and the next day's quota is not this send's.
                    logger.warning("scheduled send abandoned", metadata: ["herald.error": "\(error.message)"])
                    try await outbox.abandonScheduled(id)
                } catch is ProtoError {
                    logger.error("scheduled send abandoned: its stored request is unreadable")
                    try await outbox.abandonScheduled(id)
                }
            }
            if due.count < 100 { return }
        }
    }

    /// Failures a scheduled send is retried after (at the next tick): a peer down or slow.
    static let transient: Set<StatusCode> = [.unavailable, .deadlineExceeded, .resourceExhausted, .aborted, .cancelled]

    /// Resolves the audience and commits the send (``Outbox/enqueue(_:targets:staged:scheduled:)``).
    /// nil when a scheduled send was cancelled (or made) meanwhile.
    private func make(_ request: SendRequest, id: String, scheduled: Bool, requestID: String, logger: Logger)
        async throws -> Outcome?
    {
        // Times (TTLs) count from when the send is made.
        let sentAt = unixMillis()
        let tag = request.targetUser.isEmpty ? request.targetTag : Names.userTag(request.targetUser)

        // The whole audience is read before anything is committed: a send is all or nothing.
        if request.templateSend {
            let rendering = Mutex(
                TemplateAudience(
                    properties: PushTemplate.Properties(request.templateProperties.map { ($0.name, $0.value) }),
                    sentAt: sentAt))
            return try await streamAndCommit(
                request, id: id, scheduled: scheduled,
                StreamAudienceRequest(tag: tag, hub: request.hub, broadcast: request.broadcast, templates: true),
                requestID: requestID, logger: logger,
                targets: { batch in
                    try rendering.withLock { audience in
                        try audience.add(batch.registrations)
                        return audience.takeTargets()
                    }
                },
                payloads: {
                    let (payloads, left, refusal) = rendering.withLock {
                        ($0.payloads, $0.refusedDevices, $0.firstRefusal)
                    }
                    if let refusal {
                        // Nothing renders: the sender hears why (400). Some do: they are sent, the rest logged.
                        if payloads.isEmpty { throw refusal }
                        logger.warning(
                            "template send: devices whose template cannot be rendered are left out",
                            metadata: ["herald.devices_left_out": "\(left)", "herald.reason": "\(refusal.message)"])
                    }
                    return payloads
                })
        }
        let prepared = try Self.prepare(request.payloads, sentAt: sentAt)
        let onlyPlatform = prepared.count == 1 ? prepared.keys.first ?? .unspecified : Platform.unspecified
        if !request.deviceHandles.isEmpty {
            try await checkHandles(request, requestID: requestID)
            // The same handle twice is one device (Notification Hubs delivers at most once per handle).
            var seen = Set<String>()
            var targets: [Outbox.Target] = []
            for handle in request.deviceHandles where seen.insert(handle).inserted {
                targets.append(Outbox.Target(registrationID: "", platform: onlyPlatform, handle: handle))
            }
            return try await commit(
                request, id: id, scheduled: scheduled, payloads: Array(prepared.values), targets: targets,
                logger: logger)
        }
        return try await streamAndCommit(
            request, id: id, scheduled: scheduled,
            StreamAudienceRequest(tag: tag, platform: onlyPlatform, hub: request.hub, broadcast: request.broadcast),
            requestID: requestID, logger: logger,
            targets: { batch in
                batch.registrations.compactMap { registration -> Outbox.Target? in
                    guard prepared[registration.platform] != nil else { return nil }
                    return Outbox.Target(
                        registrationID: registration.registrationID, platform: registration.platform,
                        handle: registration.handle)
                }
            },
            payloads: { Array(prepared.values) })
    }

    /// Streams an audience, turning each batch into `targets`, and commits the send with
    /// `payloads` (read once the stream is over; what it throws stops the send).
    ///
    /// A large audience spills to the outbox's staging table as it arrives (Outbox.stage), so
    /// memory stays flat whatever its size, for a native send and a template send alike; the
    /// commit takes the staged rows with the rest, and a send that fails discards them.
    private func streamAndCommit(
        _ request: SendRequest, id: String, scheduled: Bool, _ stream: StreamAudienceRequest, requestID: String,
        logger: Logger, targets: @escaping @Sendable (AudienceBatch) throws -> [Outbox.Target],
        payloads: () throws -> [OutboxPayload]
    ) async throws -> Outcome? {
        let audience = Mutex(
            SpillingAudience(notificationID: id, maxDevices: Int(request.maxDevices), threshold: audienceMemoryRows))
        do {
            try await registrations.streamAudience(stream, requestID: requestID, timeout: audienceTimeout) {
                [outbox] batch in
                let found = try targets(batch)
                // Batches arrive one at a time (each waits for the last to be handled), so the
                // staged part is read and written back without a race.
                guard let spill = audience.withLock({ $0.add(found) }) else { return }
                var staged = audience.withLock { $0.staged }
                try await outbox.stage(spill, to: &staged)
                audience.withLock { $0.staged = staged }
            }
            let payloads = try payloads()
            let (targets, staged) = audience.withLock { ($0.buffer, $0.staged) }
            let outcome = try await commit(
                request, id: id, scheduled: scheduled, payloads: payloads, targets: targets,
                staged: staged.count > 0 ? staged : nil, logger: logger)
            if outcome == nil, staged.count > 0 { await outbox.discardStaged(staged) }
            return outcome
        } catch {
            let staged = audience.withLock { $0.staged }
            if staged.count > 0 { await outbox.discardStaged(staged) }
            throw error
        }
    }

    /// Commits a resolved send (at most `max_devices` of its targets) and answers its outcome.
    private func commit(
        _ request: SendRequest, id: String, scheduled: Bool, payloads: [OutboxPayload], targets: [Outbox.Target],
        staged: Outbox.StagedAudience? = nil, logger: Logger
    ) async throws -> Outcome? {
        var audience = targets
        let stagedCount = staged?.count ?? 0
        if request.maxDevices > 0, stagedCount + audience.count > request.maxDevices {
            audience.removeLast(stagedCount + audience.count - Int(request.maxDevices))
        }
        let sender = try request.storedSender()
        // The span whose traceparent the send stores: its deliveries' spans hang below it.
        let enqueued = try await HeraldTracing.span("outbox.enqueue") { span in
            span?.setAttribute("herald.notification_id", id)
            span?.setAttribute("herald.deliveries", stagedCount + audience.count)
            return try await outbox.enqueue(
                Outbox.Send(
                    id: id, sender: sender, targetUser: request.targetUser, targetTag: request.targetTag,
                    payloads: payloads, retryWindow: retryWindow, hub: Names.hub(request.hub),
                    lane: DeliveryLane.of(request, devices: stagedCount + audience.count),
                    originalBody: request.originalBody), targets: audience, staged: staged, scheduled: scheduled)
        }
        guard let (state, created) = enqueued else {
            logger.info("scheduled send not made: it was cancelled")
            return nil
        }
        if state == .noTargetFound {
            DispatchMetrics.sendFinished(state)
        } else {
            onEnqueue()
        }
        logger.info(
            "enqueued", metadata: ["herald.deliveries": "\(stagedCount + audience.count)", "herald.state": "\(state)"])
        var counts: [Platform: PlatformOutcome] = [:]
        for (platform, count) in staged?.perPlatform ?? [:] {
            counts[platform, default: PlatformOutcome(platform: platform)].pending += Int64(count)
        }
        for target in audience {
            counts[target.platform, default: PlatformOutcome(platform: target.platform)].pending += 1
        }
        return Outcome(
            notificationID: id, state: state,
            platforms: counts.values.sorted { $0.platform.rawValue < $1.platform.rawValue },
            createdAtUnixMs: created, sender: Principal.legacySender(stored: sender), hub: Names.hub(request.hub),
            finishedAtUnixMs: audience.isEmpty && stagedCount == 0 ? unixMillis() : 0,
            principal: Principal(stored: sender))
    }

    /// A direct send's handles, held by herald-registration to the rules (and allowed push hosts)
    /// of registered ones.
    private func checkHandles(_ request: SendRequest, requestID: String) async throws {
        guard request.payloads.count == 1 else {
            throw ServiceError.invalidArgument(
                "a send to device_handles takes exactly one payload, for the handles' platform")
        }
        guard request.deviceHandles.count <= Self.maxDirectHandles else {
            throw ServiceError.invalidArgument(
                "at most \(Self.maxDirectHandles) device handles per send, got \(request.deviceHandles.count)")
        }
        _ = try await registrations.checkHandles(
            CheckHandlesRequest(platform: request.payloads[0].platform, handles: request.deviceHandles),
            requestID: requestID)
    }

    /// Each payload checked against its provider's rules, with its delivery options resolved.
    static func prepare(_ payloads: [NativePayload], sentAt: Int64) throws -> [Platform: OutboxPayload] {
        guard !payloads.isEmpty else { throw ServiceError.invalidArgument("at least one payload is required") }
        var prepared: [Platform: OutboxPayload] = [:]
        for payload in payloads {
            guard prepared[payload.platform] == nil else {
                throw ServiceError.invalidArgument("two payloads for \(payload.platform)")
            }
            prepared[payload.platform] = try PlatformRules.prepare(payload, sentAt: sentAt)
        }
        return prepared
    }

    /// How far ahead a send may be scheduled (Notification Hubs' limit).
    static let maxScheduleAhead = Duration.seconds(7 * 86400)
    /// SendRequest.original_body's bound: NH's request limit.
    static let maxOriginalBody = 64 * 1024

    /// Handles one direct send may name (Notification Hubs' batch limit).
    static let maxDirectHandles = 1000

    /// "n-" and 32 hex characters (128 random bits).
    static func newNotificationID() -> String {
        "n-" + randomHex(words: 2)
    }
}

/// A streaming audience: targets in memory until `threshold`, then handed out to be staged; at
/// most `maxDevices` (0: no limit) are kept, the first ones.
struct SpillingAudience: Sendable {
    var buffer: [Outbox.Target] = []
    var staged: Outbox.StagedAudience
    let maxDevices: Int
    let threshold: Int

    init(notificationID: String, maxDevices: Int, threshold: Int = Outbox.StagedAudience.spillThreshold) {
        staged = Outbox.StagedAudience(notificationID: notificationID)
        self.maxDevices = maxDevices
        self.threshold = threshold
    }

    /// Adds `targets`; returns the buffer, taken, when it is time to stage it.
    mutating func add(_ targets: [Outbox.Target]) -> [Outbox.Target]? {
        if maxDevices > 0 {
            let room = max(0, maxDevices - staged.count - buffer.count)
            buffer.append(contentsOf: targets.prefix(room))
        } else {
            buffer.append(contentsOf: targets)
        }
        guard buffer.count >= threshold else { return nil }
        defer { buffer = [] }
        return buffer
    }
}
