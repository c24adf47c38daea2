import GRDB
public import HeraldProto
public import HeraldRPC

/// The RPC handlers of herald-auth.
public struct AuthHandlers: Sendable {
    public let authenticator: Authenticator

    public init(authenticator: Authenticator) {
        self.authenticator = authenticator
    }

    public func register(into table: inout MethodTable) {
        let auth = authenticator
        table.register(AuthServiceMethods.authenticate) { request, _ in try await auth.authenticate(request.authorization) }
        table.register(AuthServiceMethods.issueToken) { request, context in
            let issued = try await auth.issueToken(request.authorization)
            context.logger.info("token issued", metadata: ["herald.user": "\(issued.user)"])
            return issued
        }
        table.register(AuthServiceMethods.revokeToken) { request, _ in
            RevokeTokenResponse(revoked: try auth.revokeToken(request.token))
        }
        table.register(AuthServiceMethods.revokeUserTokens) { request, context in
            let revoked = try auth.revokeTokens(of: request.user)
            context.logger.notice("tokens revoked", metadata: ["herald.user": "\(request.user)", "herald.count": "\(revoked)"])
            return RevokeTokenResponse(revoked: revoked)
        }
        table.register(AuthServiceMethods.createUser) { request, context in
            let user = try await auth.createUser(request.user, password: request.password)
            context.logger.notice("user created", metadata: ["herald.user": "\(request.user)"])
            return UserResponse(user: user)
        }
        table.register(AuthServiceMethods.setPassword) { request, context in
            let user = try await auth.setPassword(request.user, password: request.password)
            context.logger.notice("password changed; tokens revoked", metadata: ["herald.user": "\(request.user)"])
            return UserResponse(user: user)
        }
        table.register(AuthServiceMethods.deleteUser) { request, context in
            try auth.deleteUser(request.user)
            context.logger.notice("user deleted", metadata: ["herald.user": "\(request.user)"])
            return DeleteUserResponse()
        }
        table.register(AuthServiceMethods.listUsers) { _, _ in ListUsersResponse(users: try auth.store.listUsers()) }
        table.register(AuthServiceMethods.userExists) { request, _ in
            UserExistsResponse(exists: try auth.userExists(request.user))
        }
    }
}

/// herald-auth's start-up.
public enum AuthServer {
    public static func main() async -> Never {
        await HeraldProcess.main(rpcService: "auth", extraKeys: AuthConfig.keys) { context in
            let config = try AuthConfig(reader: context.reader)
            switch config.mode {
            case .tutorial:
                context.logger.warning(
                    "auth-mode tutorial: any user whose password equals the user name is accepted; do not use in production"
                )
            case .accounts:
                context.logger.info("auth-mode accounts", metadata: ["herald.password_hash": "scrypt ln=\(config.passwordHashLogN) r=8 p=1"])
            }
            let pool = try DatabasePool(path: context.config.databasePath, configuration: HeraldDatabase.configuration)
            let store = try AccountStore(db: pool)
            let authenticator = try Authenticator(
                mode: config.mode, store: store, hasher: PasswordHasher(logN: config.passwordHashLogN),
                throttle: LoginThrottle(freeFailures: config.maxFailedLogins, lockoutSeconds: config.lockoutSeconds),
                gate: LoginGate(
                    maxPending: config.maxPendingLogins, failureBudgetPerMinute: config.failedLoginBudget,
                    maxWaitMilliseconds: config.maxLoginWaitMilliseconds),
                tokenTTLSeconds: config.tokenTTLSeconds, credentialCacheSeconds: config.credentialCacheSeconds)
            var table = MethodTable()
            AuthHandlers(authenticator: authenticator).register(into: &table)
            let purge = Periodic("token purge", every: .seconds(3600), logger: context.logger) {
                let purged = try store.purgeTokens()
                if purged > 0 { context.logger.info("purged expired tokens", metadata: ["herald.count": "\(purged)"]) }
            }
            return RPCServiceParts(table: table, background: [purge], healthChecks: [.database(pool)])
        }
    }
}
