import AsyncHTTPClient
import Foundation
import GRDB
import HeraldModel
import HeraldProto
public import HeraldRPC
import HeraldService
import PushProviders
import ServiceLifecycle

/// The RPC handlers of herald-dispatch.
public struct DispatchHandlers: DispatchServiceHandler {
    public let dispatcher: Dispatcher
    public let outbox: Outbox
    public let inbox: InboxProvider
    public let hubSenders: HubSenders?
    public let credentials: HubCredentialStore?
    /// `test-mode`: whether ResetForTests may run.
    public let testMode: Bool

    public init(
        dispatcher: Dispatcher, outbox: Outbox, inbox: InboxProvider, hubSenders: HubSenders? = nil,
        credentials: HubCredentialStore? = nil,
        testMode: Bool = false
    ) {
        self.dispatcher = dispatcher
        self.outbox = outbox
        self.inbox = inbox
        self.hubSenders = hubSenders
        self.credentials = credentials
        self.testMode = testMode
    }

    public func setHubCredentials(_ request: SetHubCredentialsRequest, context: RPCContext) async throws
        -> HubCredentialsResponse
    {
        let (senders, store) = try requireHubs()
        guard Names.isValidHubName(request.hub) else {
            throw ServiceError.invalidArgument("hub must be \(Names.hubNameRule)")
        }
        let credentials = try PlatformCredentials.parse(request)
        let platform = credentials.platform
        // A certificate already ended would only fail its pushes: refused while the old credentials
        // still stand. (One stored that ends later is loaded all the same; its pushes wait.)
        if let ends = credentials.expiresAtUnixMs, ends <= unixMillis() {
            throw ServiceError.invalidArgument(
                "the APNs certificate ended on \(iso8601(unixMillis: ends).prefix(10)): export a current one")
        }
        // Checked first, stored, then in place: a refresh reading the store meanwhile cannot undo it.
        let sender = try await senders.prepare(hub: request.hub, credentials)
        let updatedAt = try await store.set(request)
        senders.install(hub: request.hub, credentials, sender, updatedAt: updatedAt, changedHere: true)
        context.logger.notice(
            "hub credentials set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.platform": "\(platform.name)",
                "herald.credentials": "\(credentials.summary)",
            ])
        return HubCredentialsResponse(hub: request.hub, platforms: senders.status(hub: request.hub))
    }

    public func getHubCredentials(_ request: GetHubCredentialsRequest, context: RPCContext) async throws
        -> HubCredentialsResponse
    {
        let (senders, _) = try requireHubs()
        let hub = Names.hub(request.hub)
        // The last day's sends say whether each platform's credentials work.
        let health = try await outbox.recentPlatformResults(hub: hub, since: unixMillis() - 86_400_000, limit: 500)
            .health()
        var platforms = senders.status(hub: hub)
        for index in platforms.indices {
            let platform = platforms[index].platform
            if let seen = health[platform] {
                platforms[index].lastError = seen.lastError
                platforms[index].lastErrorAtUnixMs = seen.at
                platforms[index].failing = seen.failing
            }
            // Pushes waiting for a retry with nothing delivered since: failing now, for this reason.
            if let retried = senders.retried(hub: hub, platform: platform),
                retried.at >= platforms[index].lastErrorAtUnixMs
            {
                platforms[index].lastError = retried.reason
                platforms[index].lastErrorAtUnixMs = retried.at
                platforms[index].failing = true
            }
        }
        return HubCredentialsResponse(hub: hub, platforms: platforms)
    }

    public func listSends(_ request: ListSendsRequest, context: RPCContext) async throws -> ListSendsResponse {
        try request.scope.requireHub("listing a hub's sends")
        guard (0...200).contains(request.limit), request.beforeCreatedAtUnixMs >= 0 else {
            throw ServiceError.invalidArgument("limit must be 1 to 200 and before_created_at_unix_ms not negative")
        }
        let before =
            request.beforeCreatedAtUnixMs == 0
            ? (createdAt: Int64.max, id: "")
            : (createdAt: request.beforeCreatedAtUnixMs, id: request.beforeNotificationID)
        let hub = Names.hub(request.hub)
        var sends: [Outcome] = []
        for id in try await outbox.recentSends(
            hub: hub, before: before, limit: request.limit == 0 ? 25 : Int(request.limit))
        {
            // Purged between the two reads: left out.
            guard let outcome = try? await outbox.outcome(of: id, scope: .hub(hub)) else { continue }
            sends.append(outcome)
        }
        return ListSendsResponse(sends: sends)
    }

    public func sendStats(_ request: SendStatsRequest, context: RPCContext) async throws -> SendStatsResponse {
        try request.scope.requireHub("a hub's send figures")
        guard (0...1440).contains(request.minutes) else {
            throw ServiceError.invalidArgument("minutes must be 1 to 1440")
        }
        let minutes = Int64(request.minutes == 0 ? 60 : request.minutes)
        let since = (unixMillis() / 60000 - minutes + 1) * 60000
        return SendStatsResponse(minutes: try await outbox.sendStats(hub: Names.hub(request.hub), since: since))
    }

    public func deleteHubCredentials(
        _ request: DeleteHubCredentialsRequest, context: RPCContext
    ) async throws -> HubCredentialsResponse {
        let (senders, store) = try requireHubs()
        _ = try await store.delete(hub: request.hub, platform: request.platform)
        senders.remove(hub: request.hub, platform: request.platform)
        return HubCredentialsResponse(hub: request.hub, platforms: senders.status(hub: request.hub))
    }

    public func setHubPushLimits(_ request: HubPushLimits, context: RPCContext) async throws -> HubPushLimits {
        // Outbox.setPushLimits checks the hub and the limits.
        let limits = HubPushLimit(
            perDay: request.pushesPerDay, perMonth: request.pushesPerMonth, maxConcurrent: request.maxConcurrentPushes,
            weight: request.weight)
        try await outbox.setPushLimits(limits, hub: request.hub)
        context.logger.notice(
            "hub push limits set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.pushes_per_day": "\(limits.perDay)",
                "herald.pushes_per_month": "\(limits.perMonth)", "herald.max_concurrent": "\(limits.maxConcurrent)",
                "herald.weight": "\(limits.weight)",
            ])
        return try await getHubPushLimits(GetHubPushLimitsRequest(hub: request.hub), context: context)
    }

    public func getHubPushLimits(_ request: GetHubPushLimitsRequest, context: RPCContext) async throws
        -> HubPushLimits
    {
        try Outbox.checkHub(request.hub)
        let (limits, today, month) = try await outbox.pushLimits(hub: request.hub)
        return HubPushLimits(
            hub: request.hub, pushesPerDay: limits.perDay, pushesPerMonth: limits.perMonth,
            maxConcurrentPushes: limits.maxConcurrent, pushesToday: today, pushesThisMonth: month,
            weight: limits.weight)
    }

    public func getHubQueue(_ request: GetHubQueueRequest, context: RPCContext) async throws -> HubQueueStatus {
        try request.scope.requireHub("a hub's queue")
        try Outbox.checkHub(request.hub)
        let queue = try await outbox.hubQueue(hub: request.hub)
        return HubQueueStatus(pending: queue.pending, oldestDueMs: queue.oldestDue)
    }

    func requireHubs() throws -> (HubSenders, HubCredentialStore) {
        guard let hubSenders, let credentials else {
            throw ServiceError(.unimplemented, "hub credentials are not served here")
        }
        return (hubSenders, credentials)
    }

    public func resetForTests(_ request: ResetForTestsRequest, context: RPCContext) async throws
        -> ResetForTestsResponse
    {
        try TestMode.require(testMode, service: .dispatch)
        var deleted = try await outbox.deleteEverything() + inbox.deleteEverything()
        // herald-auth's reset deletes the hubs; their credentials go with them.
        if let credentials, let hubSenders {
            for hub in Set(try await credentials.all().map(\.hub)) {
                deleted += Int64(try await credentials.delete(hub: hub, platform: .unspecified))
                hubSenders.remove(hub: hub, platform: .unspecified)
            }
        }
        return ResetForTestsResponse(deleted: deleted)
    }

    public func send(_ request: SendRequest, context: RPCContext) async throws -> SendResponse {
        SendResponse(outcome: try await dispatcher.send(request, context: context))
    }

    public func cancelScheduled(_ request: CancelScheduledRequest, context: RPCContext) async throws -> Outcome {
        guard !request.notificationID.isEmpty else { throw ServiceError.invalidArgument("notification_id is required") }
        let outcome = try await outbox.cancelScheduled(
            request.notificationID, scope: SendScope(requester: "", hub: request.hub, scope: request.scope))
        context.logger.info(
            "scheduled send cancelled", metadata: ["herald.notification_id": "\(request.notificationID)"])
        return outcome
    }

    public func deleteHubSends(_ request: DeleteHubSendsRequest, context: RPCContext) async throws
        -> DeleteHubSendsResponse
    {
        guard !request.hub.isEmpty else { throw ServiceError.invalidArgument("hub is required") }
        guard request.hub != Names.defaultHub else {
            throw ServiceError(.failedPrecondition, "the hub default cannot be deleted")
        }
        let cancelled = try await outbox.cancelScheduled(hub: request.hub)
        let deleted = try await outbox.purge(hub: request.hub)
        try await outbox.deletePushLimits(hub: request.hub)
        context.logger.notice(
            "a deleted hub's sends removed",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.cancelled": "\(cancelled)", "herald.deleted": "\(deleted)",
            ])
        return DeleteHubSendsResponse(cancelled: cancelled, deleted: Int64(deleted))
    }

    public func eraseUser(_ request: EraseUserRequest, context: RPCContext) async throws -> EraseUserResponse {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        let erased = try await outbox.eraseUser(request.user, hub: request.hub)
        context.logger.notice(
            "user's sends erased",
            metadata: [
                "herald.user": "\(request.user)", "herald.hub": "\(request.hub)", "herald.removed": "\(erased.removed)",
                "herald.redacted": "\(erased.redacted)",
            ])
        return EraseUserResponse(removed: erased.removed, redacted: erased.redacted)
    }

    public func eraseDevices(_ request: EraseDevicesRequest, context: RPCContext) async throws -> EraseUserResponse {
        guard request.devices.count <= 1000 else { throw ServiceError.invalidArgument("at most 1,000 devices") }
        guard request.devices.allSatisfy({ $0.registrationID.utf8.count <= 256 && $0.handle.utf8.count <= 8192 })
        else {
            throw ServiceError.invalidArgument("a registration id is over 256 bytes or a handle over 8,192")
        }
        let erased = try await outbox.eraseDevices(request.devices)
        guard erased.inFlight == 0 else {
            throw ServiceError(
                .unavailable,
                "\(erased.inFlight) deliveries to these devices are in flight; erase them again once they are answered")
        }
        return EraseUserResponse(removed: erased.removed, redacted: erased.redacted)
    }

    public func exportUser(_ request: ExportUserRequest, context: RPCContext) async throws -> ExportPage {
        let limit = try ExportJSON.check(request)
        struct Item: Encodable {
            var notificationId: String
            var hub: String
            var sender: String
            var targetUser: String
            var targetTag: String
            var state: String
            var createdAt: String
            var finishedAt: String
        }
        let page = try await outbox.exportSends(
            user: request.user, hub: request.hub, after: request.after, limit: limit)
        let items = try page.map {
            try ExportJSON.encode(
                Item(
                    notificationId: $0.id, hub: $0.hub, sender: $0.sender, targetUser: $0.targetUser,
                    targetTag: $0.targetTag, state: "\($0.state)", createdAt: ExportJSON.time($0.createdAt),
                    finishedAt: ExportJSON.time($0.finishedAt)))
        }
        return ExportPage(items: items, next: page.count == limit ? page.last?.id ?? "" : "")
    }

    public func exportDeviceRecords(_ request: ExportDeviceRecordsRequest, context: RPCContext) async throws
        -> ExportPage
    {
        let limit = try ExportJSON.pageSize(request.limit)
        guard request.devices.count <= ExportLimits.devicesPerCall else {
            throw ServiceError.invalidArgument("at most \(ExportLimits.devicesPerCall) devices")
        }
        guard request.devices.allSatisfy({ $0.registrationID.utf8.count <= 256 }) else {
            throw ServiceError.invalidArgument("a registration id is over 256 bytes")
        }
        // The cursor is the last sequence of the page before, as text: ExportPage's cursors are strings.
        guard let after = request.after.isEmpty ? 0 : Int64(request.after), after >= 0 else {
            throw ServiceError.invalidArgument("after must be the next of a page before")
        }
        let ids = request.devices.map(\.registrationID)
        guard !ids.isEmpty else { return ExportPage() }
        var items: [[UInt8]] = []
        var last: Int64 = 0
        switch request.kind {
        case .deliveries:
            let page = try await outbox.exportDeliveries(to: ids, after: after, limit: limit)
            items = page.map(Self.exportItem)
            last = page.last?.sequence ?? 0
        case .inbox:
            let page = try await outbox.exportInbox(of: ids, after: after, limit: limit)
            items = page.map { InboxEntryJSON($0).sortedJSON }
            last = page.last?.sequence ?? 0
        case .unrecognized(let kind):
            throw ServiceError.invalidArgument("unknown kind \(kind)")
        }
        return ExportPage(items: items, next: items.count == limit ? String(last) : "")
    }

    /// A delivery record of an export: its members sorted by name, as every export item's are
    /// (written by ``JSONObjectWriter``: an export writes one per delivery).
    static func exportItem(_ delivery: DeviceDelivery) -> [UInt8] {
        var item = JSONObjectWriter()
        item.member("attempts", Int64(delivery.attempts))
        item.member("handle", delivery.handle)
        item.member("lastStatus", Int64(delivery.lastStatus))
        item.member("notificationId", delivery.notificationID)
        item.member("platform", delivery.platform.name)
        item.member("reason", delivery.reason)
        item.member("registrationId", delivery.registrationID)
        item.member("state", "\(delivery.state)")
        item.member("updatedAt", ExportJSON.time(delivery.updatedAt))
        return item.finished
    }

    public func getOutcome(_ request: GetOutcomeRequest, context: RPCContext) async throws -> Outcome {
        try await outbox.outcome(
            of: request.notificationID,
            scope: SendScope(requester: request.requester, hub: request.hub, hubs: request.hubs, scope: request.scope))
    }

    public func listDeliveries(_ request: ListDeliveriesRequest, context: RPCContext) async throws
        -> ListDeliveriesResponse
    {
        let limit = try Self.pageSize(request.limit, after: request.afterSequence)
        return ListDeliveriesResponse(
            deliveries: try await outbox.deliveries(
                of: request.notificationID,
                scope: SendScope(requester: request.requester, hub: request.hub, scope: request.scope),
                failedOnly: request.failedOnly,
                after: request.afterSequence, limit: limit))
    }

    public func listInbox(_ request: ListInboxRequest, context: RPCContext) async throws -> ListInboxResponse {
        let limit = try Self.pageSize(request.limit, after: min(request.afterSequence, request.beforeSequence))
        let page: InboxProvider.Page =
            request.newestFirst ? .newestBefore(request.beforeSequence) : .after(request.afterSequence)
        return ListInboxResponse(entries: try await inbox.list(page, limit: limit, handle: request.handle))
    }

    /// A page's size: 100 when unset, at most 1000; negative limits and cursors are refused.
    static func pageSize(_ limit: Int32, after: Int64) throws -> Int {
        guard limit >= 0, after >= 0 else {
            throw ServiceError.invalidArgument("limit and after_sequence must not be negative")
        }
        return limit == 0 ? 100 : min(Int(limit), 1000)
    }
}
