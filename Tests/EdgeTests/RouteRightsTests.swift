import Foundation
import GRDB
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldSQL
import HeraldService
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import RegistrationService
import Testing

@testable import Edge
@testable import EdgeTestSupport

/// The rights table (``RouteRights``) against the router and against what the routes do.
@Suite("the rights table", .watchedForStalls)
struct RouteRightsTests {
    static func router() throws -> Router<EdgeRequestContext> {
        try FakeServices().router(testMode: true)
    }

    @Test("every route the edge serves has its row in the rights table, and every row its route")
    func everyRouteHasARow() throws {
        let routes = Set(try Self.router().routes.map(\.description))
        let rows = RouteRights.table.map(\.route)
        #expect(Set(rows).count == rows.count, "a route has two rows")
        #expect(routes.subtracting(rows).sorted() == [], "routes without a row in RouteRights.table")
        #expect(Set(rows).subtracting(routes).sorted() == [], "rows without a route")
    }

    @Test("every route that changes how a hub is managed names its audit record")
    func managementChangesAreAudited() {
        // What changes nothing an operator answers for: a sign-in and out, a test send.
        let notManagement: Set = ["POST /console/login", "POST /console/logout", "POST /console/hubs/{hub}/send"]
        for row in RouteRights.table where row.method != "GET" && !notManagement.contains(row.route) {
            let management: Bool
            switch row.needs {
            case .manage, .console: management = true
            case .key(let rights): management = rights.contains(.manage)
            default: management = false
            }
            #expect(
                management == (row.audit != nil), "\(row.route): management \(management), audit \(row.audit ?? "none")"
            )
        }
    }

    @Test("docs/security.md's rights table is RouteRights.markdown")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/security.md"), encoding: .utf8)
        #expect(text.contains(RouteRights.markdown), "docs/security.md should hold:\n\(RouteRights.markdown)")
    }

    /// Who calls: nobody, a forged credential, each kind of hub key, and Herald users with each
    /// kind of right (the columns of the matrix).
    enum Caller: String, CaseIterable, CustomStringConvertible {
        case none, badSignature, listen, send, full, otherHubsFull
        case userWithoutRights, userWithSend, userManagingAnotherHub, userManagingThisHub, userWithManage
        var description: String { rawValue }

        /// The rights herald-auth verifies a SAS token of this caller to hold on `app1`; nil:
        /// refused (no header, a bad signature, another hub's key, not a SAS token at all).
        var keyRights: HubRights? {
            switch self {
            case .listen: .listen
            case .send: .send
            case .full: [.listen, .send, .manage]
            default: nil
            }
        }

        var isHeraldUser: Bool {
            [.userWithoutRights, .userWithSend, .userManagingAnotherHub, .userManagingThisHub, .userWithManage]
                .contains(self)
        }

        /// The user's rights on `hub`, as herald-auth answers (`userWithManage` is the stack's admin:
        /// Manage on the hub `default`, so on every hub).
        func userRights(hub: String) -> [HubRight] {
            switch self {
            case .userWithSend: [.listen, .send]
            case .userManagingAnotherHub: hub == "app2" ? [.listen, .send, .manage] : []
            // A tenant: Manage on the hub the paths name, not on the hub default.
            case .userManagingThisHub: hub == "app1" ? [.listen, .send, .manage] : []
            case .userWithManage: [.listen, .send, .manage]
            default: []
            }
        }

        /// The credentials this caller sends to `row`.
        func headers(_ row: RouteRights.Row) -> HTTPFields {
            var fields = HTTPFields()
            let console: Bool
            if case .console = row.needs { console = true } else { console = false }
            switch self {
            case .none: break
            case .badSignature:
                if console {
                    fields[.cookie] = "herald_session=forged"
                } else if row.needsUser {
                    fields[.authorization] = "Basic " + Data("userWithManage:wrong".utf8).base64EncodedString()
                } else {
                    fields[.authorization] = RouteRightsTests.sas(self)
                }
            case .listen, .send, .full, .otherHubsFull:
                fields[.authorization] = RouteRightsTests.sas(self)
            case .userWithoutRights, .userWithSend, .userManagingAnotherHub, .userManagingThisHub, .userWithManage:
                if console {
                    fields[.cookie] = "herald_session=\(rawValue)"
                } else if row.route == "DELETE /v1/auth/token" {
                    fields[.authorization] = "Bearer \(rawValue)"
                } else {
                    fields[.authorization] = "Basic " + Data("\(rawValue):pw".utf8).base64EncodedString()
                }
            }
            return fields
        }
    }

    static func sas(_ caller: Caller) -> String {
        "SharedAccessSignature sr=http%3a%2f%2flocalhost%2fapp1&sig=c2lnbmF0dXJl&se=4102444800&skn=\(caller.rawValue)"
    }

    /// herald-auth's verdict on a SAS token, as the fake answers it (the key's name says who it is).
    static func sasVerdict(_ request: AuthorizeSasRequest) throws -> [HubRight] {
        let name = request.authorization.components(separatedBy: "skn=").last ?? ""
        guard let caller = Caller(rawValue: name), let rights = caller.keyRights else {
            throw ServiceError(.unauthenticated, "InvalidSignature")
        }
        return [HubRight.listen, .send, .manage].filter { rights.contains(HubRights([$0])) }
    }

    /// herald-auth's verdict on a Herald user (Basic `<caller>:pw`, or Bearer `<caller>`, the token
    /// the fake issues), as the fake answers it; SAS tokens and wrong passwords are refused.
    static func userVerdict(_ request: AuthenticateRequest) throws -> AuthenticateResponse {
        let header = request.authorization
        var name: String?
        if header.hasPrefix("Basic "), let decoded = Data(base64Encoded: String(header.dropFirst(6))) {
            let pair = String(decoding: decoded, as: UTF8.self).split(separator: ":", maxSplits: 1)
            if pair.count == 2, pair[1] == "pw" { name = String(pair[0]) }
        } else if header.hasPrefix("Bearer ") {
            name = String(header.dropFirst(7))
        }
        guard let name, let caller = Caller(rawValue: name), caller.isHeraldUser else {
            throw ServiceError(.unauthenticated, "wrong user name or password")
        }
        return AuthenticateResponse(user: name, scheme: "basic", rights: caller.userRights(hub: request.hub))
    }

    /// Whether the rights table lets `caller` through `row` (nil: the table's words are new to this test).
    static func allowed(_ row: RouteRights.Row, _ caller: Caller) -> Bool? {
        switch row.needs {
        case .anyone, .testMode: return true
        case .key(let needs): return caller.keyRights?.isSuperset(of: needs) ?? false
        case .manageOrOneHandle: return caller.keyRights?.contains(.manage) ?? false
        case .user(let what):
            guard caller.isHeraldUser else { return false }
            // The matrix's sends go to another user (bob).
            return what == RouteRights.ownDevicesOrSend
                ? caller.userRights(hub: Names.defaultHub).contains(.send) : true
        case .manage(let managed):
            guard caller.isHeraldUser else { return false }
            // The path names app1, which userManagingAnotherHub does not manage (app2) and
            // userManagingThisHub does (but not the hub default).
            switch managed {
            case .theirHubs: return true
            case .defaultHub: return caller == .userWithManage
            case .pathHub: return caller == .userWithManage || caller == .userManagingThisHub
            // The matrix reads without `?hub=`: the whole trail, the stack's admin's.
            case .queryHub: return caller == .userWithManage
            }
        case .console(let what):
            guard caller.isHeraldUser else { return false }
            switch what {
            case "any session", "the hubs it holds Manage on": return true
            case "an administrator", "an administrator, on a stack without push credentials", "Manage on the hub",
                "Manage on the send's hub":
                return caller == .userWithManage
            default: return nil
            }
        }
    }

    static func uri(_ row: RouteRights.Row, query: String = "") -> String {
        // The console's pages are of a hub the fake holds ("default"); the NH API's of app1.
        let hub: String
        if case .console = row.needs { hub = "default" } else { hub = "app1" }
        var uri = row.path.replacingOccurrences(of: "{hub}", with: hub).replacingOccurrences(of: "{id}", with: "7")
            .replacingOccurrences(of: "{tag}", with: "news").replacingOccurrences(of: "{user}", with: "u1")
            .replacingOccurrences(of: "{key}", with: "k1").replacingOccurrences(of: "{platform}", with: "apns")
        switch row.route {
        case "POST /api/notifications": uri += "?pns=apns&to_tag=bob"
        case "POST /v1/notifications": uri += "?kind=alert&to_user=bob&message=hi"
        default: break
        }
        return uri + query
    }

    /// A body the route takes, when it takes one: forms carry the session's CSRF token.
    static func body(_ row: RouteRights.Row, _ caller: Caller) -> (String, String)? {
        switch row.route {
        case "POST /console/login":
            return ("application/x-www-form-urlencoded", "user=userWithManage&password=pw&_csrf=n1")
        case "PUT /api/register/{id}":
            return ("application/json", #"{"Platform":"apns","Handle":"\#(String(repeating: "ab", count: 32))"}"#)
        case "POST /api/notifications": return ("application/json", #""hi""#)
        default: break
        }
        if case .console = row.needs, row.method == "POST" {
            let csrf = ConsoleSession(token: caller.rawValue, user: caller.rawValue, admin: false).csrf
            return ("application/x-www-form-urlencoded", "_csrf=\(csrf)&name=app3&message=hi&user=bob")
        }
        return ["POST", "PUT", "PATCH"].contains(row.method) ? ("application/xml", "{}") : nil
    }

    /// Whether the answer refuses the caller: 401, 403; on the console also its way back to the
    /// sign-in page (`/console/login?expired=1`; signing out leads to plain `/console/login`) and
    /// 404 for what another hub holds (a send's page does not say that the send exists).
    static func refused(_ row: RouteRights.Row, _ response: TestResponse) -> Bool {
        if [.unauthorized, .forbidden].contains(response.status) { return true }
        if case .console = row.needs {
            if response.status == .notFound { return true }
            if response.status == .seeOther {
                return response.headers[.location]?.hasPrefix("/console/login?") ?? false
            }
        }
        return false
    }

    static func call(_ client: any TestClientProtocol, _ row: RouteRights.Row, _ caller: Caller, query: String = "")
        async throws -> TestResponse
    {
        var headers = caller.headers(row)
        var body: ByteBuffer?
        if let (type, text) = Self.body(row, caller) {
            headers[.contentType] = type
            body = ByteBuffer(string: text)
        }
        if row.route == "POST /console/login" { headers[.cookie] = "herald_signin=n1" }
        let method = try #require(HTTPRequest.Method(row.method))
        return try await client.execute(uri: uri(row, query: query), method: method, headers: headers, body: body) {
            $0
        }
    }

    @Test(
        "each route lets through exactly the callers its row names: no credential, a bad signature, Listen, Send, Full, another hub's key, Herald users without rights, with Send, with Manage on another hub, with Manage",
        arguments: RouteRights.table.map(\.route))
    func matrix(route: String) async throws {
        let row = try #require(RouteRights.table.first { $0.route == route })
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let services = FakeServices(
            hubRegistrations: RegistrationHandlers(store: store), sasVerdict: Self.sasVerdict,
            userVerdict: Self.userVerdict)
        try await EdgeRouteTests.withEdge(services, testMode: true) { client in
            for caller in Caller.allCases {
                let expected = try #require(Self.allowed(row, caller), "no expectation for \(route)'s words")
                let response = try await Self.call(client, row, caller)
                #expect(
                    expected == !Self.refused(row, response),
                    "\(route) with \(caller): \(response.status.code) \(String(buffer: response.body).prefix(200))")
                guard row.needs == .manageOrOneHandle else { continue }
                // One handle: Listen suffices.
                let one = try await Self.call(
                    client, row, caller, query: "?$filter=" + Self.encoded("ChannelUri eq 'abcd'"))
                #expect(
                    (caller.keyRights?.contains(.listen) ?? false) == !Self.refused(row, one),
                    "\(route) by handle with \(caller): \(one.status.code)")
                // Parameters that would widen it are never a read without Manage.
                for filter in ["ChannelUri eq ''", "ChannelUri eq ' '", "ChannelUri eq '*'", "*"] {
                    let widened = try await Self.call(client, row, caller, query: "?$filter=" + Self.encoded(filter))
                    if caller.keyRights?.contains(.manage) != true {
                        #expect(
                            widened.status != .ok || filter.contains("'*'"), "\(route) $filter=\(filter) with \(caller)"
                        )
                    }
                }
            }
        }
    }

    static func encoded(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
    }

    @Test("a paging token from another hub's feed reads nothing of that hub")
    func pagingTokenFromAnotherHub() async throws {
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let services = FakeServices(hubRegistrations: RegistrationHandlers(store: store), sasVerdict: Self.sasVerdict)
        try await EdgeRouteTests.withEdge(services) { client in
            var headers: HTTPFields = [.authorization: Self.sas(.full), .contentType: "application/atom+xml"]
            for (hub, token) in [("app2", "a1"), ("app2", "a2"), ("app2", "a3"), ("app1", "b1")] {
                let entry = """
                    <entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">\
                    <AppleRegistrationDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">\
                    <Tags>t</Tags><DeviceToken>\(String(repeating: token, count: 32))</DeviceToken>\
                    </AppleRegistrationDescription></content></entry>
                    """
                try await client.execute(
                    uri: "/\(hub)/registrations", method: .post, headers: headers, body: ByteBuffer(string: entry)
                ) { #expect($0.status == .ok, "\(String(buffer: $0.body))") }
            }
            headers[.contentType] = nil
            let paging = try await client.execute(uri: "/app2/registrations?$top=1", method: .get, headers: headers) {
                $0.headers[HTTPField.Name("x-ms-continuationtoken")!] ?? ""
            }
            #expect(!paging.isEmpty)
            for uri in ["/app1/registrations", "/app1/tags/t/registrations"] {
                let body = try await client.execute(
                    uri: "\(uri)?ContinuationToken=\(Self.encoded(paging))", method: .get, headers: headers
                ) { String(buffer: $0.body) }
                #expect(!body.contains("a1a1") && !body.contains("a2a2") && !body.contains("a3a3"), "\(uri): \(body)")
            }
        }
    }
}

extension RouteRights.Row {
    /// The route takes a Herald user's credentials (Basic or Bearer).
    var needsUser: Bool {
        switch needs {
        case .user, .manage: true
        default: false
        }
    }
}
