import Edge
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird
import Logging
import RegistrationService
import Synchronization

/// All four services and their health in one fake: answers from fixed values or throws the error
/// it was given, and records the request id of every call (the last 256). Used by EdgeTests and
/// by herald-fuzz's `router` target.
final class FakeServices: AuthServiceClientProtocol, RegistrationServiceClientProtocol, PayloadServiceClientProtocol,
    DispatchServiceClientProtocol, HealthClientProtocol
{
    let authError: ServiceError?
    let registrationError: ServiceError?
    let payloadError: ServiceError?
    let dispatchError: ServiceError?
    let healthy: Bool
    /// What AuthorizeSas answers.
    let sasRights: [HubRight]
    /// What Authenticate grants (the console's admin holds Manage).
    let userRights: [HubRight]
    /// What ListHubs answers (the default hub unless given).
    let hubs: [Hub]
    private let seen = Mutex<
        (
            ids: [String], deleted: [Int64], resets: Int, inbox: [ListInboxRequest], outcomes: [GetOutcomeRequest],
            audits: [AppendAuditRequest]
        )
    >(([], [], 0, [], [], []))

    /// A real herald-registration (in-memory SQLite) behind the NH registration RPCs, when given.
    let hubRegistrations: RegistrationHandlers?
    /// What AuthorizeSas answers for a request, when given (instead of `sasRights`): the rights, or
    /// a thrown refusal (RouteRightsTests' keys).
    let sasVerdict: (@Sendable (AuthorizeSasRequest) throws -> [HubRight])?
    /// What Authenticate (and IssueToken, RevokeToken) answer for a request, when given (instead
    /// of alice with `userRights`): RouteRightsTests' Herald users.
    let userVerdict: (@Sendable (AuthenticateRequest) throws -> AuthenticateResponse)?

    init(
        authError: ServiceError? = nil, registrationError: ServiceError? = nil, payloadError: ServiceError? = nil,
        dispatchError: ServiceError? = nil, healthy: Bool = true, sasRights: [HubRight] = [.listen],
        userRights: [HubRight] = [.listen, .send], hubRegistrations: RegistrationHandlers? = nil,
        sasVerdict: (@Sendable (AuthorizeSasRequest) throws -> [HubRight])? = nil,
        userVerdict: (@Sendable (AuthenticateRequest) throws -> AuthenticateResponse)? = nil, hubs: [Hub] = [hub]
    ) {
        self.hubs = hubs
        self.sasVerdict = sasVerdict
        self.userVerdict = userVerdict
        self.userRights = userRights
        self.hubRegistrations = hubRegistrations
        self.sasRights = sasRights
        self.authError = authError
        self.registrationError = registrationError
        self.payloadError = payloadError
        self.dispatchError = dispatchError
        self.healthy = healthy
    }

    /// The edge's whole router over these fakes, every route with its middleware, as herald-edge
    /// builds it (EdgeTests' in-process client, the rights table's enumeration, herald-fuzz).
    func router(profile: String = "rich", testMode: Bool = false) throws -> Router<EdgeRequestContext> {
        let config = try EdgeConfig(
            reader: ConfigReader(arguments: ["--profile", profile, "--test-mode", "\(testMode)"]))
        let routes = EdgeRoutes(
            auth: self, registration: self, payload: self, dispatch: self,
            health: ["auth": self, "registration": self, "payload": self, "dispatch": self], config: config)
        let router = Router(context: EdgeRequestContext.self)
        routes.add(to: router)
        return router
    }

    var requestIDs: [String] { seen.withLock { $0.ids } }
    var deleted: [Int64] { seen.withLock { $0.deleted } }
    var resetCount: Int { seen.withLock { $0.resets } }
    var inboxRequests: [ListInboxRequest] { seen.withLock { $0.inbox } }
    var outcomeRequests: [GetOutcomeRequest] { seen.withLock { $0.outcomes } }
    /// The audit records the edge appended (the last 256).
    var auditRequests: [AppendAuditRequest] { seen.withLock { $0.audits } }

    // every service: one method satisfies all four client protocols
    func resetForTests(_ request: ResetForTestsRequest, options: RPCCallOptions) async throws -> ResetForTestsResponse {
        seen.withLock { $0.resets += 1 }
        return ResetForTestsResponse(deleted: 1)
    }

    private func record(_ options: RPCCallOptions, _ error: ServiceError?) throws {
        seen.withLock { Self.append(options.requestID ?? "<none>", to: &$0.ids) }
        if let error { throw error }
    }

    /// The last 256 calls are kept: the router fuzzer makes millions.
    private static func append<Element>(_ element: Element, to list: inout [Element]) {
        if list.count >= 256 { list.removeFirst(list.count - 255) }
        list.append(element)
    }

    private static func unused() -> ServiceError { ServiceError(.unimplemented, "not used by these tests") }

    // auth
    func authenticate(_ request: AuthenticateRequest, options: RPCCallOptions) async throws -> AuthenticateResponse {
        try record(options, authError)
        if let userVerdict { return try userVerdict(request) }
        return AuthenticateResponse(user: "alice", scheme: "basic", rights: userRights)
    }
    func issueToken(_ request: IssueTokenRequest, options: RPCCallOptions) async throws -> IssueTokenResponse {
        guard let userVerdict else { throw Self.unused() }
        // The token is the user's name: Authenticate takes "Bearer <name>" back as that user.
        let user = try userVerdict(AuthenticateRequest(authorization: request.authorization)).user
        return IssueTokenResponse(
            token: user, user: user, expiresAtUnixMs: Int64(Date().timeIntervalSince1970 * 1000) + 3_600_000)
    }
    func revokeToken(_ request: RevokeTokenRequest, options: RPCCallOptions) async throws -> RevokeTokenResponse {
        guard userVerdict != nil else { throw Self.unused() }
        return RevokeTokenResponse(revoked: 1)
    }
    func revokeUserTokens(_ request: RevokeUserTokensRequest, options: RPCCallOptions) async throws
        -> RevokeTokenResponse
    {
        throw Self.unused()
    }
    func createUser(_ request: CreateUserRequest, options: RPCCallOptions) async throws -> UserResponse {
        throw Self.unused()
    }
    func setPassword(_ request: SetPasswordRequest, options: RPCCallOptions) async throws -> UserResponse {
        throw Self.unused()
    }
    func deleteUser(_ request: DeleteUserRequest, options: RPCCallOptions) async throws -> DeleteUserResponse {
        throw Self.unused()
    }
    /// Auth's, payload's and dispatch's EraseUser alike.
    func eraseUser(_ request: EraseUserRequest, options: RPCCallOptions) async throws -> EraseUserResponse {
        throw Self.unused()
    }
    func eraseDevices(_ request: EraseDevicesRequest, options: RPCCallOptions) async throws -> EraseUserResponse {
        throw Self.unused()
    }
    /// Auth's, payload's and dispatch's ExportUser alike.
    func exportUser(_ request: ExportUserRequest, options: RPCCallOptions) async throws -> ExportPage {
        throw Self.unused()
    }
    func exportUserDevices(_ request: ExportUserRequest, options: RPCCallOptions) async throws -> ExportPage {
        throw Self.unused()
    }
    func exportDeviceRecords(_ request: ExportDeviceRecordsRequest, options: RPCCallOptions) async throws
        -> ExportPage
    {
        throw Self.unused()
    }
    func listUserDevices(_ request: ListUserDevicesRequest, options: RPCCallOptions) async throws
        -> ListUserDevicesResponse
    {
        throw Self.unused()
    }
    func eraseUserDevices(_ request: EraseUserDevicesRequest, options: RPCCallOptions) async throws
        -> EraseUserResponse
    {
        throw Self.unused()
    }
    func listUsers(_ request: ListUsersRequest, options: RPCCallOptions) async throws -> ListUsersResponse {
        throw Self.unused()
    }
    func userExists(_ request: UserExistsRequest, options: RPCCallOptions) async throws -> UserExistsResponse {
        try record(options, authError)
        return UserExistsResponse(exists: true)
    }

    func createHub(_ request: CreateHubRequest, options: RPCCallOptions) async throws -> Hub { throw Self.unused() }
    /// One hub, "default", with one key: what the console's pages read.
    static let hub = Hub(
        name: "default", createdAtUnixMs: 1_700_000_000_000,
        keys: [HubKey(name: "DefaultFullSharedAccessSignature", rights: [.listen, .send, .manage])], id: "h-1")
    func listHubs(_ request: ListHubsRequest, options: RPCCallOptions) async throws -> ListHubsResponse {
        try record(options, authError)
        return ListHubsResponse(hubs: hubs)
    }
    func getHub(_ request: GetHubRequest, options: RPCCallOptions) async throws -> Hub {
        try record(options, authError)
        guard let hub = hubs.first(where: { $0.name.lowercased() == request.name.lowercased() }) else {
            throw ServiceError(.notFound, "hub \(request.name) not found")
        }
        return hub
    }
    func deleteHub(_ request: DeleteHubRequest, options: RPCCallOptions) async throws -> DeleteHubResponse {
        throw Self.unused()
    }
    func listHubKeys(_ request: ListHubKeysRequest, options: RPCCallOptions) async throws -> ListHubKeysResponse {
        throw Self.unused()
    }
    func setHubKey(_ request: SetHubKeyRequest, options: RPCCallOptions) async throws -> HubKey { throw Self.unused() }
    func rotateHubKey(_ request: RotateHubKeyRequest, options: RPCCallOptions) async throws -> HubKey {
        throw Self.unused()
    }
    func revokeHubKey(_ request: RevokeHubKeyRequest, options: RPCCallOptions) async throws -> RevokeHubKeyResponse {
        throw Self.unused()
    }
    func authorizeSas(_ request: AuthorizeSasRequest, options: RPCCallOptions) async throws -> AuthorizeSasResponse {
        try record(options, authError)
        // A hub's immutable id, as herald-auth answers it: the edge reads and writes by it.
        let hubID = request.hub
        if let sasVerdict {
            return AuthorizeSasResponse(keyName: "key", rights: try sasVerdict(request), hubID: hubID)
        }
        return AuthorizeSasResponse(keyName: "DefaultListenSharedAccessSignature", rights: sasRights, hubID: hubID)
    }
    func grantHubRights(_ request: GrantHubRightsRequest, options: RPCCallOptions) async throws
        -> GrantHubRightsResponse
    {
        throw Self.unused()
    }
    func setHubLimits(_ request: SetHubLimitsRequest, options: RPCCallOptions) async throws -> Hub {
        throw Self.unused()
    }
    func appendAudit(_ request: AppendAuditRequest, options: RPCCallOptions) async throws -> AuditRecord {
        try record(options, authError)
        seen.withLock { Self.append(request, to: &$0.audits) }
        return AuditRecord(seq: 1, actor: request.actor, action: request.action)
    }
    func listAudit(_ request: ListAuditRequest, options: RPCCallOptions) async throws -> ListAuditResponse {
        try record(options, authError)
        return ListAuditResponse(records: [], headSeq: 0, headHash: String(repeating: "0", count: 64))
    }

    // registration
    func putInstallation(_ request: PutInstallationRequest, options: RPCCallOptions) async throws
        -> InstallationResponse
    {
        try record(options, registrationError)
        return InstallationResponse(json: request.json)
    }
    func patchInstallation(_ request: PatchInstallationRequest, options: RPCCallOptions) async throws
        -> InstallationResponse
    {
        try record(options, registrationError)
        return InstallationResponse()
    }
    func getInstallation(_ request: GetInstallationRequest, options: RPCCallOptions) async throws
        -> InstallationResponse
    {
        try record(options, registrationError)
        return InstallationResponse(json: Array(#"{"installationId":"\#(request.installationID)"}"#.utf8))
    }
    func deleteInstallation(
        _ request: DeleteInstallationRequest, options: RPCCallOptions
    ) async throws -> DeleteInstallationResponse {
        try record(options, registrationError)
        return DeleteInstallationResponse(deleted: false)
    }
    func listInstallations(
        _ request: ListInstallationsRequest, options: RPCCallOptions
    ) async throws -> ListInstallationsResponse { throw Self.unused() }
    func deleteHubDevices(_ request: DeleteHubDevicesRequest, options: RPCCallOptions) async throws
        -> DeleteHubDevicesResponse
    {
        throw Self.unused()
    }
    private func hubRegistrationServer(_ options: RPCCallOptions) throws -> (RegistrationHandlers, RPCContext) {
        try record(options, registrationError)
        guard let hubRegistrations else { throw Self.unused() }
        return (
            hubRegistrations,
            RPCContext(requestID: options.requestID ?? "", method: "hub-registration", logger: Logger(label: "test"))
        )
    }
    func putHubRegistration(_ request: PutHubRegistrationRequest, options: RPCCallOptions) async throws
        -> HubRegistrationResponse
    {
        let (server, context) = try hubRegistrationServer(options)
        return try await server.putHubRegistration(request, context: context)
    }
    func getHubRegistration(_ request: GetHubRegistrationRequest, options: RPCCallOptions) async throws
        -> HubRegistrationResponse
    {
        let (server, context) = try hubRegistrationServer(options)
        return try await server.getHubRegistration(request, context: context)
    }
    func deleteHubRegistration(_ request: DeleteHubRegistrationRequest, options: RPCCallOptions) async throws
        -> DeleteHubRegistrationResponse
    {
        let (server, context) = try hubRegistrationServer(options)
        return try await server.deleteHubRegistration(request, context: context)
    }
    func listHubRegistrations(_ request: ListHubRegistrationsRequest, options: RPCCallOptions) async throws
        -> ListHubRegistrationsResponse
    {
        let (server, context) = try hubRegistrationServer(options)
        return try await server.listHubRegistrations(request, context: context)
    }

    /// One filled registration and one id allocated but not yet filled (no platform, no handle).
    func listDevices(_ request: ListDevicesRequest, options: RPCCallOptions) async throws -> ListDevicesResponse {
        try record(options, registrationError)
        return ListDevicesResponse(devices: [
            Registration(
                registrationID: "r-1", owner: "alice", platform: .apns, handle: "ab12", tags: ["username:alice"],
                updatedAtUnixMs: 1_700_000_000_000, hub: request.hub),
            Registration(registrationID: "r-2", owner: "alice", hub: request.hub),
        ])
    }
    func exportDevices(
        _ request: ExportDevicesRequest, options: RPCCallOptions,
        onMessage: @escaping @Sendable (ExportBatch) async throws -> Void
    ) async throws { throw Self.unused() }
    func createRegistrationId(
        _ request: CreateRegistrationIdRequest, options: RPCCallOptions
    ) async throws -> CreateRegistrationIdResponse {
        try record(options, registrationError)
        return CreateRegistrationIdResponse(registrationID: "r-1")
    }
    func upsertRegistration(
        _ request: UpsertRegistrationRequest, options: RPCCallOptions
    ) async throws -> UpsertRegistrationResponse {
        try record(options, registrationError)
        return UpsertRegistrationResponse()
    }
    func deleteRegistration(
        _ request: DeleteRegistrationRequest, options: RPCCallOptions
    ) async throws -> DeleteRegistrationResponse {
        try record(options, registrationError)
        return DeleteRegistrationResponse()
    }
    func listRegistrations(
        _ request: ListRegistrationsRequest, options: RPCCallOptions
    ) async throws -> ListRegistrationsResponse { throw Self.unused() }
    func removeHandle(_ request: RemoveHandleRequest, options: RPCCallOptions) async throws -> RemoveHandleResponse {
        throw Self.unused()
    }
    func checkHandles(_ request: CheckHandlesRequest, options: RPCCallOptions) async throws -> CheckHandlesResponse {
        throw Self.unused()
    }
    func cancelScheduled(_ request: CancelScheduledRequest, options: RPCCallOptions) async throws -> Outcome {
        throw Self.unused()
    }
    func deleteHubSends(_ request: DeleteHubSendsRequest, options: RPCCallOptions) async throws
        -> DeleteHubSendsResponse
    {
        throw Self.unused()
    }
    func streamAudience(
        _ request: StreamAudienceRequest, options: RPCCallOptions,
        onMessage: @escaping @Sendable (AudienceBatch) async throws -> Void
    ) async throws { throw Self.unused() }

    // payload
    func storePayload(_ request: StorePayloadRequest, options: RPCCallOptions) async throws -> StorePayloadResponse {
        try record(options, nil)
        return StorePayloadResponse(id: 7)
    }
    func fetchPayload(_ request: FetchPayloadRequest, options: RPCCallOptions) async throws -> FetchPayloadResponse {
        try record(options, payloadError)
        return FetchPayloadResponse(
            id: request.id, kind: .rich, content: Array("hello".utf8), contentType: "text/plain")
    }
    func deletePayload(_ request: DeletePayloadRequest, options: RPCCallOptions) async throws -> DeletePayloadResponse {
        seen.withLock { Self.append(request.id, to: &$0.deleted) }
        return DeletePayloadResponse()
    }

    // dispatch
    func send(_ request: SendRequest, options: RPCCallOptions) async throws -> SendResponse {
        try record(options, dispatchError)
        return SendResponse(outcome: Outcome(notificationID: "n-1"))
    }
    /// A send on the first of the request's `hubs` when it names some, else on the default hub.
    func getOutcome(_ request: GetOutcomeRequest, options: RPCCallOptions) async throws -> Outcome {
        try record(options, dispatchError)
        seen.withLock { Self.append(request, to: &$0.outcomes) }
        return Outcome(
            notificationID: request.notificationID, state: .completed,
            platforms: [
                PlatformOutcome(
                    platform: .apns, success: 2, failure: 1,
                    failures: [FailureCount(reason: "BadDeviceToken", count: 1)],
                    removedHandles: 1, retries: 3)
            ],
            createdAtUnixMs: 1_700_000_000_000, sender: "alice", hub: request.hubs.first ?? Self.hub.id)
    }
    func listInbox(_ request: ListInboxRequest, options: RPCCallOptions) async throws -> ListInboxResponse {
        seen.withLock { Self.append(request, to: &$0.inbox) }
        return ListInboxResponse(entries: [
            InboxEntry(
                sequence: 5, notificationID: "n-1", registrationID: "r-1", platform: .apns, handle: request.handle,
                headers: [Header(name: "apns-push-type", value: "alert")], payload: Array(#"{"aps":{}}"#.utf8),
                recordedAtUnixMs: 1)
        ])
    }
    /// A full page (`limit` rows, so the page links to the next): the first delivered, the rest pending.
    func listDeliveries(
        _ request: ListDeliveriesRequest, options: RPCCallOptions
    ) async throws -> ListDeliveriesResponse {
        try record(options, dispatchError)
        return ListDeliveriesResponse(
            deliveries: (1...max(1, Int64(request.limit))).map { sequence in
                DeliveryRecord(
                    sequence: request.afterSequence + sequence, registrationID: "r-1", platform: .apns,
                    state: sequence == 1 ? .delivered : .pending, attempts: 1, messageID: "m-\(sequence)",
                    lastStatus: sequence == 1 ? 200 : 503, nextAttemptAtUnixMs: sequence == 1 ? 0 : 1_700_000_060_000,
                    handle: "ab12")
            })
    }
    func setHubCredentials(
        _ request: SetHubCredentialsRequest, options: RPCCallOptions
    ) async throws -> HubCredentialsResponse { throw Self.unused() }
    func getHubCredentials(
        _ request: GetHubCredentialsRequest, options: RPCCallOptions
    ) async throws -> HubCredentialsResponse {
        try record(options, dispatchError)
        return HubCredentialsResponse(
            hub: request.hub,
            platforms: [
                HubPlatformCredentials(
                    platform: .apns, source: .hub, summary: "team T, key K", updatedAtUnixMs: 1_700_000_000_000,
                    lastError: "InvalidProviderToken", lastErrorAtUnixMs: 1_700_000_001_000, failing: true),
                HubPlatformCredentials(platform: .fcm, source: .inbox),
            ])
    }
    func listSends(_ request: ListSendsRequest, options: RPCCallOptions) async throws -> ListSendsResponse {
        try record(options, dispatchError)
        return ListSendsResponse(sends: [
            try await getOutcome(GetOutcomeRequest(notificationID: "n-1"), options: options)
        ])
    }
    func sendStats(_ request: SendStatsRequest, options: RPCCallOptions) async throws -> SendStatsResponse {
        try record(options, dispatchError)
        let minute = unixMillis() / 60_000 * 60_000
        return SendStatsResponse(minutes: [
            SendStatsMinute(
                startUnixMs: minute, delivered: 120, failures: [FailureCount(reason: "BadDeviceToken", count: 3)],
                sends: 2)
        ])
    }
    func deleteHubCredentials(
        _ request: DeleteHubCredentialsRequest, options: RPCCallOptions
    ) async throws -> HubCredentialsResponse { throw Self.unused() }
    func setHubPushLimits(_ request: HubPushLimits, options: RPCCallOptions) async throws -> HubPushLimits {
        throw Self.unused()
    }
    func getHubPushLimits(_ request: GetHubPushLimitsRequest, options: RPCCallOptions) async throws -> HubPushLimits {
        HubPushLimits(
            hub: request.hub, pushesPerMonth: 1_000_000, pushesToday: 1200, pushesThisMonth: 45_000, weight: 2)
    }
    func getHubQueue(_ request: GetHubQueueRequest, options: RPCCallOptions) async throws -> HubQueueStatus {
        try request.scope.requireHub("a hub's queue")
        return HubQueueStatus(pending: 1500, oldestDueMs: 2500)
    }

    // grpc.health.v1
    func check(_ request: HealthCheckRequest, options: RPCCallOptions) async throws -> HealthCheckResponse {
        HealthCheckResponse(status: healthy ? .serving : .notServing)
    }
    func watch(
        _ request: HealthCheckRequest, options: RPCCallOptions,
        onMessage: @escaping @Sendable (HealthCheckResponse) async throws -> Void
    ) async throws { throw Self.unused() }
}

/// The edge's whole router in test mode over ``FakeServices`` that grant every right, with
/// `registrations` answering the NH registration and installation RPCs: the fuzz router target's
/// harness.
package enum PermissiveRouter {
    package static func make(registrations: RegistrationHandlers) throws -> Router<EdgeRequestContext> {
        try FakeServices(
            sasRights: [.listen, .send, .manage], userRights: [.listen, .send, .manage],
            hubRegistrations: registrations
        ).router(testMode: true)
    }
}
