import Foundation
import GRDB
import HeraldModel
public import HeraldProto
public import HeraldRPC
public import HeraldService
import NIOCore
import NIOPosix
import ServiceLifecycle

/// The RPC handlers of herald-auth.
///
/// Every handler that changes accounts, tokens, hubs or grants calls `authenticator.changed()`
/// (in a `defer`: after its store has committed, before the answer leaves, even when it fails
/// half-way), which bumps `auth.generation` so that herald-edge stops reusing the verdicts it
/// holds. A new mutating RPC must do the same.
public struct AuthHandlers: AuthServiceHandler {
    public let authenticator: Authenticator
    /// Hubs, their keys and the Herald users' grants.
    public let hubs: HubStore
    /// The audit trail of management changes.
    public let audit: AuditStore
    public let sas: SASVerifier
    /// `test-mode`: whether ResetForTests may run.
    public let testMode: Bool
    /// Created again after each ResetForTests.
    public let testUser: (name: String, password: String)?

    public init(
        authenticator: Authenticator, hubs: HubStore, audit: AuditStore,
        sasThrottle: LoginThrottle = LoginThrottle(freeFailures: 20), testMode: Bool = false,
        testUser: (name: String, password: String)? = nil
    ) {
        self.authenticator = authenticator
        self.hubs = hubs
        self.audit = audit
        self.sas = SASVerifier(
            hubs: hubs, throttle: sasThrottle, reuseFor: .milliseconds(authenticator.verdictTTL))
        self.testMode = testMode
        self.testUser = testUser
    }

    public func resetForTests(_ request: ResetForTestsRequest, context: RPCContext) async throws
        -> ResetForTestsResponse
    {
        defer { authenticator.changed() }
        try TestMode.require(testMode, service: .auth)
        let deleted =
            try await authenticator.deleteEverything() + hubs.deleteEverything() + audit.deleteEverything()
        try await sas.throttle.forgetAll()
        if let testUser { try await Self.prepare(testUser, authenticator, hubs) }
        return ResetForTestsResponse(deleted: deleted)
    }

    public func authenticate(_ request: AuthenticateRequest, context: RPCContext) async throws -> AuthenticateResponse {
        var answer = try await authenticator.authenticate(request.authorization, from: request.clientAddress)
        // The request rate the edge enforces: the named hub's, or the default's (the tutorial's
        // and /v1's routes), which is also every answer without a hub.
        let hub =
            request.hub.isEmpty || request.hub == Names.defaultHub
            ? Names.defaultHub : try await hubs.resolve(request.hub)?.name ?? request.hub
        // With a hub named, the user's rights on it too, in the same read.
        let (rate, granted) = try await hubs.requestRate(
            hub: hub, rightsOf: request.hub.isEmpty ? nil : answer.user)
        answer.requestsPerSecond = rate.perSecond
        answer.requestBurst = rate.burst
        guard !request.hub.isEmpty else { return answer }
        // Tutorial mode keeps "Notify users": anyone may notify anyone.
        answer.hubRights = authenticator.mode == .tutorial ? granted.union([.listen, .send]) : granted
        return answer
    }

    public func issueToken(_ request: IssueTokenRequest, context: RPCContext) async throws -> IssueTokenResponse {
        let issued = try await authenticator.issueToken(request.authorization, from: request.clientAddress)
        context.logger.info("token issued", metadata: ["herald.user": "\(issued.user)"])
        return issued
    }

    public func revokeToken(_ request: RevokeTokenRequest, context: RPCContext) async throws -> RevokeTokenResponse {
        defer { authenticator.changed() }
        return RevokeTokenResponse(revoked: try await authenticator.revokeToken(request.token))
    }

    public func revokeUserTokens(_ request: RevokeUserTokensRequest, context: RPCContext) async throws
        -> RevokeTokenResponse
    {
        defer { authenticator.changed() }
        let revoked = try await authenticator.revokeTokens(of: request.user)
        context.logger.notice(
            "tokens revoked", metadata: ["herald.user": "\(request.user)", "herald.count": "\(revoked)"])
        return RevokeTokenResponse(revoked: revoked)
    }

    public func createUser(_ request: CreateUserRequest, context: RPCContext) async throws -> UserResponse {
        defer { authenticator.changed() }
        let user = try await authenticator.createUser(request.user, password: request.password)
        context.logger.notice("user created", metadata: ["herald.user": "\(request.user)"])
        return UserResponse(user: user)
    }

    public func setPassword(_ request: SetPasswordRequest, context: RPCContext) async throws -> UserResponse {
        defer { authenticator.changed() }
        let user = try await authenticator.setPassword(request.user, password: request.password)
        context.logger.notice("password changed; tokens revoked", metadata: ["herald.user": "\(request.user)"])
        return UserResponse(user: user)
    }

    public func deleteUser(_ request: DeleteUserRequest, context: RPCContext) async throws -> DeleteUserResponse {
        defer { authenticator.changed() }
        try await authenticator.deleteUser(request.user)
        context.logger.notice("user deleted", metadata: ["herald.user": "\(request.user)"])
        return DeleteUserResponse()
    }

    public func eraseUser(_ request: EraseUserRequest, context: RPCContext) async throws -> EraseUserResponse {
        try ExportJSON.checkPerson(user: request.user, hub: request.hub)
        defer { authenticator.changed() }
        let removed = try await authenticator.eraseUser(request.user) + (try await hubs.revokeGrants(of: request.user))
        context.logger.notice(
            "user erased", metadata: ["herald.user": "\(request.user)", "herald.removed": "\(removed)"])
        return EraseUserResponse(removed: removed)
    }

    public func exportUser(_ request: ExportUserRequest, context: RPCContext) async throws -> ExportPage {
        try ExportJSON.check(request)
        struct Account: Encodable {
            var name: String
            var createdAt: String
            var passwordChangedAt: String
        }
        struct Grant: Encodable {
            var hub: String
            var rights: [String]
        }
        struct Item: Encodable {
            var account: Account?
            var liveTokens: Int64
            var grants: [Grant]
        }
        let (user, live) = try await authenticator.store.exportUser(request.user)
        let item = Item(
            account: user.map {
                Account(
                    name: $0.name, createdAt: ExportJSON.time($0.createdAtUnixMs),
                    passwordChangedAt: ExportJSON.time($0.passwordChangedAtUnixMs))
            },
            liveTokens: live,
            grants: try await hubs.grants(of: request.user).map { Grant(hub: $0.hub, rights: $0.rights.names) })
        return ExportPage(items: [try ExportJSON.encode(item)])
    }

    public func listUsers(_ request: ListUsersRequest, context: RPCContext) async throws -> ListUsersResponse {
        ListUsersResponse(users: try await authenticator.store.listUsers())
    }

    public func userExists(_ request: UserExistsRequest, context: RPCContext) async throws -> UserExistsResponse {
        UserExistsResponse(exists: try await authenticator.userExists(request.user))
    }

    /// The test stack's known user: its account, and Send and Manage on the hub default, so that a
    /// test may send to any user or tag as a back end would.
    static func prepare(
        _ testUser: (name: String, password: String), _ authenticator: Authenticator, _ hubs: HubStore
    ) async throws {
        try await authenticator.ensureUser(testUser.name, password: testUser.password)
        try await hubs.grant(hub: Names.defaultHub, user: testUser.name, rights: .full)
    }

    // MARK: hubs

    /// The stored spelling of the hub `name` names (regardless of case), or NOT_FOUND: the store's
    /// per-hub calls take the stored name.
    private func stored(_ name: String) async throws -> String {
        if name == Names.defaultHub { return name }
        guard let found = try await hubs.resolve(name) else { throw HubRules.notFound(name) }
        return found.name
    }

    public func createHub(_ request: CreateHubRequest, context: RPCContext) async throws -> Hub {
        defer { authenticator.changed() }
        let hub = try await hubs.createHub(request.name, maxInstallations: request.maxInstallations)
        context.logger.notice("hub created", metadata: ["herald.hub": "\(request.name)"])
        return hub
    }

    // MARK: audit

    public func appendAudit(_ request: AppendAuditRequest, context: RPCContext) async throws -> AuditRecord {
        try await audit.append(request)
    }

    public func listAudit(_ request: ListAuditRequest, context: RPCContext) async throws -> ListAuditResponse {
        try await audit.list(request)
    }

    public func listHubs(_ request: ListHubsRequest, context: RPCContext) async throws -> ListHubsResponse {
        ListHubsResponse(hubs: try await hubs.listHubs())
    }

    public func getHub(_ request: GetHubRequest, context: RPCContext) async throws -> Hub {
        try await hubs.hub(request.name)
    }

    public func deleteHub(_ request: DeleteHubRequest, context: RPCContext) async throws -> DeleteHubResponse {
        defer { authenticator.changed() }
        try await hubs.deleteHub(try await stored(request.name))
        context.logger.notice("hub deleted", metadata: ["herald.hub": "\(request.name)"])
        return DeleteHubResponse()
    }

    public func listHubKeys(_ request: ListHubKeysRequest, context: RPCContext) async throws -> ListHubKeysResponse {
        ListHubKeysResponse(keys: try await hubs.keys(of: try await stored(request.hub)))
    }

    public func setHubKey(_ request: SetHubKeyRequest, context: RPCContext) async throws -> HubKey {
        defer { authenticator.changed() }
        let key = try await hubs.setKey(
            hub: try await stored(request.hub), name: request.name, rights: try request.requestedRights())
        context.logger.notice(
            "hub key set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.key": "\(request.name)", "herald.rights": "\(key.rights)",
            ])
        return key
    }

    public func rotateHubKey(_ request: RotateHubKeyRequest, context: RPCContext) async throws -> HubKey {
        defer { authenticator.changed() }
        let which = request.which.lowercased()
        guard which == "primary" || which == "secondary" else {
            throw ServiceError.invalidArgument("which must be primary or secondary")
        }
        let key = try await hubs.rotateKey(
            hub: try await stored(request.hub), name: request.name, secondary: which == "secondary")
        context.logger.notice(
            "hub key rotated",
            metadata: ["herald.hub": "\(request.hub)", "herald.key": "\(request.name)", "herald.which": "\(which)"])
        return key
    }

    public func revokeHubKey(_ request: RevokeHubKeyRequest, context: RPCContext) async throws -> RevokeHubKeyResponse {
        defer { authenticator.changed() }
        try await hubs.revokeKey(hub: try await stored(request.hub), name: request.name)
        context.logger.notice(
            "hub key revoked", metadata: ["herald.hub": "\(request.hub)", "herald.key": "\(request.name)"])
        return RevokeHubKeyResponse()
    }

    public func setHubLimits(_ request: SetHubLimitsRequest, context: RPCContext) async throws -> Hub {
        defer { authenticator.changed() }
        let hub = try await hubs.setLimits(
            hub: try await stored(request.hub), maxInstallations: request.maxInstallations,
            requestsPerSecond: request.requestsPerSecond, requestBurst: request.requestBurst)
        context.logger.notice(
            "hub limits set",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.max_installations": "\(request.maxInstallations)",
                "herald.requests_per_second": "\(request.requestsPerSecond)",
                "herald.request_burst": "\(request.requestBurst)",
            ])
        return hub
    }

    public func authorizeSas(_ request: AuthorizeSasRequest, context: RPCContext) async throws -> AuthorizeSasResponse {
        try await sas.authorize(
            hub: Names.hub(request.hub), header: request.authorization, resource: request.resource,
            client: request.clientAddress)
    }

    public func grantHubRights(_ request: GrantHubRightsRequest, context: RPCContext) async throws
        -> GrantHubRightsResponse
    {
        defer { authenticator.changed() }
        let rights = try request.requestedRights()
        guard try await authenticator.store.userExists(request.user) || authenticator.mode == .tutorial else {
            throw ServiceError.notFound("user \(request.user) not found")
        }
        try await hubs.grant(hub: try await stored(request.hub), user: request.user, rights: rights)
        context.logger.notice(
            "hub rights granted",
            metadata: [
                "herald.hub": "\(request.hub)", "herald.user": "\(request.user)", "herald.rights": "\(rights.names)",
            ])
        var answer = GrantHubRightsResponse()
        answer.hubRights = rights
        return answer
    }
}

/// herald-auth's start-up.
public enum AuthServer {
    /// What herald-auth runs; `HeraldProcess.main` runs it as a process, tests build it in-process.
    public static let definition = ServiceDefinition.rpc(.auth, extraKeys: AuthConfig.keys) { context in
        let config = try AuthConfig(reader: context.reader)
        switch config.mode {
        case .tutorial:
            context.logger.warning(
                "auth-mode tutorial: any user whose password equals the user name is accepted; do not use in production"
            )
        case .accounts:
            context.logger.info(
                "auth-mode accounts", metadata: ["herald.password_hash": "scrypt ln=\(config.passwordHashLogN) r=8 p=1"]
            )
        }
        let database = try context.openDatabase()
        let store = try await AccountStore(db: database.sql)
        let hubs = try await HubStore(db: database.sql)
        let audit = try await AuditStore(db: database.sql)
        let ledger: any LockoutLedger
        let lockoutPurge: @Sendable () async throws -> Int
        if store.isShared {
            // Lockouts live in the database: failures spread over replicas add up.
            let shared = SharedLockoutLedger(db: database.sql)
            ledger = shared
            lockoutPurge = { try await shared.purge(now: unixMillis(), window: LockoutPolicy.defaultWindow) }
        } else {
            // Lockouts outlive a restart: otherwise one crash of herald-auth resets them all.
            let kept = try await KeptLockoutLedger(db: database.sql)
            ledger = kept
            lockoutPurge = { try await kept.purge(now: unixMillis(), window: LockoutPolicy.defaultWindow) }
        }
        // The generation counter herald-edge watches, beside each of our sockets (see SharedGeneration).
        let generations = try Set(
            [context.config.leanSocketPath, context.config.grpcSocketPath].compactMap { $0 }.map(
                SharedGeneration.authPath(besideSocket:))
        ).map { path in
            try FileManager.default.createDirectory(
                atPath: URL(fileURLWithPath: path).deletingLastPathComponent().path, withIntermediateDirectories: true)
            guard let generation = try SharedGeneration(path: path, writable: true) else {
                throw ConfigError("cannot map the generation counter \(path)")
            }
            return generation
        }
        let bumpGenerations: @Sendable () -> Void = { for generation in generations { generation.bump() } }
        // A restart may follow a restored or edited database: verdicts from before it are void.
        bumpGenerations()
        let verdictCache: Duration
        switch database {
        case .sqlite: verdictCache = config.verdictCache ?? .seconds(60)
        case .postgres: verdictCache = config.verdictCache ?? .zero
        }
        // Password hashes run on a pool of this service's own (a thread per core, as NIO's
        // singleton pool would be in herald-auth's process), stopped after the listeners: where
        // several stacks share one process (a test's in-process stacks), one stack's hashes never
        // wait on another's, and the gate's measured hash time stays this service's.
        let hashingPool = NIOThreadPool(numberOfThreads: System.coreCount)
        hashingPool.start()
        let authenticator = try Authenticator(
            mode: config.mode, store: store, hasher: PasswordHasher(logN: config.passwordHashLogN),
            throttle: LoginThrottle(freeFailures: config.maxFailedLogins, lockout: config.lockout, ledger: ledger),
            gate: LoginGate(
                maxPending: config.maxPendingLogins, failureBudgetPerMinute: config.failedLoginBudget,
                maxWaitMilliseconds: config.maxLoginWaitMilliseconds),
            tokenTTL: config.tokenTTL, credentialCache: config.credentialCache, verdictCache: verdictCache,
            changed: bumpGenerations, hashingPool: hashingPool)
        if let testUser = config.testUser {
            try await AuthHandlers.prepare(testUser, authenticator, hubs)
            context.logger.warning(
                "test-mode: test-user is ready; never run a test stack in production",
                metadata: ["herald.user": "\(testUser.name)"])
        }
        var table = MethodTable()
        AuthHandlers(
            authenticator: authenticator, hubs: hubs, audit: audit,
            sasThrottle: LoginThrottle(freeFailures: 20, ledger: ledger),
            testMode: context.config.testMode, testUser: config.testUser
        ).register(into: &table)
        // Before its first await, Authenticate reads memory or the WAL database only (the password
        // hash runs on its own pool), so it may start on the event loop.
        table.startOnEventLoop(AuthServiceMethods.authenticate)
        let purgeLockouts = lockoutPurge
        let purge = Periodic("token purge", every: .seconds(3600), logger: context.logger) {
            let purged = try await store.purgeTokens(grace: 24 * 3600 * 1000)
            if purged > 0 { context.logger.info("purged expired tokens", metadata: ["herald.count": "\(purged)"]) }
            _ = try await purgeLockouts()
        }
        return RPCServiceParts(
            table: table, background: [ThreadPoolService(pool: hashingPool)] + database.services + [purge],
            healthChecks: [database.healthCheck])
    }
}

/// Runs until the group shuts down, then stops `pool` once the work on it has finished.
struct ThreadPoolService: Service {
    let pool: NIOThreadPool

    func run() async throws {
        try? await gracefulShutdown()
        try await pool.shutdownGracefully()
    }
}
