import AuthService
import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Logging
import Synchronization
import Testing

/// herald-auth's RPC handlers, as the method table calls them. Above all the rule the edge's
/// verdict cache rests on: every handler that changes accounts, tokens, hubs, keys or grants bumps
/// the generation after its store commits, also when it fails half-way, so that a revocation holds
/// at the edge from the next request (services/auth/README.md). A new mutating RPC that forgets it
/// fails `everyChangeBumps`.
@Suite("auth handlers", .watchedForStalls)
struct AuthHandlersTests {
    static let context = RPCContext(requestID: "auth", method: "test", logger: Logger(label: "test"))

    struct Fixture {
        var handlers: AuthHandlers
        let bumps: Counted

        func changes(_ call: () async throws -> some Any) async -> (bumps: Int, code: StatusCode?) {
            let before = bumps.value
            var code: StatusCode?
            do { _ = try await call() } catch let error as ServiceError { code = error.code } catch { code = .unknown }
            return (bumps.value - before, code)
        }
    }

    final class Counted: Sendable {
        let count = Atomic<Int>(0)
        var value: Int { count.load(ordering: .sequentiallyConsistent) }
    }

    static func fixture(_ mode: AuthMode = .accounts) async throws -> Fixture {
        let db = try SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration))
        let bumps = Counted()
        // As AuthTests' fixture: the tests of this process share one hashing pool, which the
        // gate's wait model does not know of, so a login may wait behind another test's hashes.
        let authenticator = try Authenticator(
            mode: mode, store: try await AccountStore(db: db), hasher: PasswordHasher(logN: 10),
            gate: LoginGate(maxPending: 8, failureBudgetPerMinute: 600, maxWaitMilliseconds: 600_000),
            changed: { bumps.count.wrappingAdd(1, ordering: .sequentiallyConsistent) })
        let handlers = AuthHandlers(
            authenticator: authenticator, hubs: try await HubStore(db: db), audit: try await AuditStore(db: db))
        return Fixture(handlers: handlers, bumps: bumps)
    }

    @Test("every change, made or refused, bumps the generation; reads and refused arguments before any write do not")
    func everyChangeBumps() async throws {
        let f = try await Self.fixture()
        let h = f.handlers
        let c = Self.context
        // Each mutating RPC, once as it succeeds and once as the store refuses it.
        let calls: [(String, StatusCode?, () async throws -> Any)] = [
            (
                "CreateUser", nil,
                { try await h.createUser(CreateUserRequest(user: "ann", password: "long enough pw"), context: c) }
            ),
            (
                "CreateUser taken", .alreadyExists,
                { try await h.createUser(CreateUserRequest(user: "ann", password: "long enough pw"), context: c) }
            ),
            (
                "SetPassword", nil,
                { try await h.setPassword(SetPasswordRequest(user: "ann", password: "another long pw"), context: c) }
            ),
            (
                "SetPassword unknown", .notFound,
                { try await h.setPassword(SetPasswordRequest(user: "nobody", password: "another long pw"), context: c) }
            ),
            ("RevokeToken", nil, { try await h.revokeToken(RevokeTokenRequest(token: "not-a-token"), context: c) }),
            (
                "RevokeUserTokens", nil,
                { try await h.revokeUserTokens(RevokeUserTokensRequest(user: "ann"), context: c) }
            ),
            ("CreateHub", nil, { try await h.createHub(CreateHubRequest(name: "app1"), context: c) }),
            ("CreateHub taken", .alreadyExists, { try await h.createHub(CreateHubRequest(name: "app1"), context: c) }),
            (
                "SetHubKey", nil,
                { try await h.setHubKey(SetHubKeyRequest(hub: "app1", name: "Ops", rights: [.send]), context: c) }
            ),
            (
                "SetHubKey no hub", .notFound,
                { try await h.setHubKey(SetHubKeyRequest(hub: "nohub", name: "Ops", rights: [.send]), context: c) }
            ),
            (
                "RotateHubKey", nil,
                {
                    try await h.rotateHubKey(
                        RotateHubKeyRequest(hub: "app1", name: "Ops", which: "primary"), context: c)
                }
            ),
            (
                "RotateHubKey unknown", .notFound,
                {
                    try await h.rotateHubKey(
                        RotateHubKeyRequest(hub: "app1", name: "Nope", which: "secondary"), context: c)
                }
            ),
            (
                "GrantHubRights", nil,
                {
                    try await h.grantHubRights(
                        GrantHubRightsRequest(hub: "app1", user: "ann", rights: [.manage]), context: c)
                }
            ),
            (
                "GrantHubRights unknown user", .notFound,
                {
                    try await h.grantHubRights(
                        GrantHubRightsRequest(hub: "app1", user: "zed", rights: [.send]), context: c)
                }
            ),
            (
                "SetHubLimits", nil,
                {
                    try await h.setHubLimits(
                        SetHubLimitsRequest(hub: "app1", requestsPerSecond: 50, requestBurst: 100), context: c)
                }
            ),
            (
                "SetHubLimits no hub", .notFound,
                { try await h.setHubLimits(SetHubLimitsRequest(hub: "nohub", requestsPerSecond: 5), context: c) }
            ),
            (
                "RevokeHubKey", nil,
                { try await h.revokeHubKey(RevokeHubKeyRequest(hub: "app1", name: "Ops"), context: c) }
            ),
            (
                "RevokeHubKey gone", .notFound,
                { try await h.revokeHubKey(RevokeHubKeyRequest(hub: "app1", name: "Ops"), context: c) }
            ),
            ("EraseUser", nil, { try await h.eraseUser(EraseUserRequest(user: "ann"), context: c) }),
            ("DeleteHub", nil, { try await h.deleteHub(DeleteHubRequest(name: "app1"), context: c) }),
            ("DeleteHub gone", .notFound, { try await h.deleteHub(DeleteHubRequest(name: "app1"), context: c) }),
            ("DeleteUser gone", .notFound, { try await h.deleteUser(DeleteUserRequest(user: "ann"), context: c) }),
        ]
        for (name, expected, call) in calls {
            let (bumps, code) = await f.changes(call)
            #expect(code == expected, "\(name): \(code.map { "\($0)" } ?? "ok")")
            #expect(bumps >= 1, "\(name) changed nothing the edge would notice")
        }
        // Reads change nothing, and neither does a request refused before any write.
        let reads: [(String, () async throws -> Any)] = [
            ("ListHubs", { try await h.listHubs(ListHubsRequest(), context: c) }),
            ("ListUsers", { try await h.listUsers(ListUsersRequest(), context: c) }),
            ("UserExists", { try await h.userExists(UserExistsRequest(user: "ann"), context: c) }),
            ("ExportUser", { try await h.exportUser(ExportUserRequest(user: "ann"), context: c) }),
            ("EraseUser of no one", { try await h.eraseUser(EraseUserRequest(user: ""), context: c) }),
        ]
        for (name, call) in reads {
            #expect(await f.changes(call).bumps == 0, "\(name)")
        }
    }

    @Test("hub keys: a rotation's which is primary or secondary; rights this build does not know are refused")
    func keyArguments() async throws {
        let f = try await Self.fixture()
        _ = try await f.handlers.createHub(CreateHubRequest(name: "app2"), context: Self.context)
        for which in ["", "both", "tertiary"] {
            #expect(
                await f.changes {
                    try await f.handlers.rotateHubKey(
                        RotateHubKeyRequest(hub: "app2", name: HubRules.fullKeyName, which: which),
                        context: Self.context)
                }.code == .invalidArgument, "\(which)")
        }
        let rotated = try await f.handlers.rotateHubKey(
            RotateHubKeyRequest(hub: "APP2", name: HubRules.fullKeyName, which: "SECONDARY"), context: Self.context)
        let keys = try await f.handlers.listHubKeys(ListHubKeysRequest(hub: "app2"), context: Self.context).keys
        let full = try #require(keys.first { $0.name == HubRules.fullKeyName })
        #expect(full.secondaryKey == rotated.secondaryKey && full.primaryKey == rotated.primaryKey)
        for rights in [[HubRight.unrecognized(9)], [.unspecified], [.send, .unrecognized(4)]] {
            #expect(
                await f.changes {
                    try await f.handlers.setHubKey(
                        SetHubKeyRequest(hub: "app2", name: "K", rights: rights), context: Self.context)
                }.code == .invalidArgument)
        }
        #expect(
            await f.changes {
                try await f.handlers.grantHubRights(
                    GrantHubRightsRequest(hub: "app2", user: "u", legacyRights: ["Admin"]), context: Self.context)
            }.code == .invalidArgument)
    }

    @Test(
        "Authenticate with a hub: the hub's request rate, and the user's rights on it only (tutorial: Listen and Send)")
    func authenticateWithHub() async throws {
        let f = try await Self.fixture()
        _ = try await f.handlers.createUser(
            CreateUserRequest(user: "ann", password: "long enough pw"), context: Self.context)
        _ = try await f.handlers.createHub(CreateHubRequest(name: "app3"), context: Self.context)
        _ = try await f.handlers.setHubLimits(
            SetHubLimitsRequest(hub: "app3", requestsPerSecond: 7, requestBurst: 9), context: Self.context)
        let basic = "Basic " + Data("ann:long enough pw".utf8).base64EncodedString()
        let none = try await f.handlers.authenticate(
            AuthenticateRequest(authorization: basic, hub: "app3"), context: Self.context)
        #expect(none.user == "ann" && none.hubRights.isEmpty)
        #expect(none.requestsPerSecond == 7 && none.requestBurst == 9)
        _ = try await f.handlers.grantHubRights(
            GrantHubRightsRequest(hub: "app3", user: "ann", rights: [.send]), context: Self.context)
        let granted = try await f.handlers.authenticate(
            AuthenticateRequest(authorization: basic, hub: "App3"), context: Self.context)
        #expect(granted.hubRights == .send)
        // Without a hub: no rights, the default hub's rate.
        let plain = try await f.handlers.authenticate(AuthenticateRequest(authorization: basic), context: Self.context)
        #expect(plain.hubRights.isEmpty && plain.rights.isEmpty)

        let tutorial = try await Self.fixture(.tutorial)
        _ = try await tutorial.handlers.createHub(CreateHubRequest(name: "app4"), context: Self.context)
        let anyone = try await tutorial.handlers.authenticate(
            AuthenticateRequest(authorization: "Basic " + Data("bob:bob".utf8).base64EncodedString(), hub: "app4"),
            context: Self.context)
        #expect(anyone.hubRights == [.listen, .send])
    }
}
