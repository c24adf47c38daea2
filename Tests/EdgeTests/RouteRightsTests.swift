import Foundation
import GRDB
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldService
import Hummingbird
import HummingbirdTesting
import RegistrationService
import Testing

@testable import Edge

/// The rights table (``RouteRights``) against the router and against what the routes do.
@Suite("the rights table")
struct RouteRightsTests {
    static func router() throws -> Router<EdgeRequestContext> {
        let services = FakeServices()
        let config = try EdgeConfig(reader: ConfigReader(arguments: ["--test-mode", "true"]))
        let routes = EdgeRoutes(
            auth: services, registration: services, payload: services, dispatch: services,
            health: ["auth": services], config: config)
        let router = Router(context: EdgeRequestContext.self)
        routes.add(to: router)
        return router
    }

    @Test("every route the edge serves has its row in the rights table, and every row its route")
    func everyRouteHasARow() throws {
        let routes = Set(try Self.router().routes.map(\.description))
        let rows = RouteRights.table.map(\.route)
        #expect(Set(rows).count == rows.count, "a route has two rows")
        #expect(routes.subtracting(rows).sorted() == [], "routes without a row in RouteRights.table")
        #expect(Set(rows).subtracting(routes).sorted() == [], "rows without a route")
    }

    @Test("docs/security.md's rights table is RouteRights.markdown")
    func documented() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/security.md"), encoding: .utf8)
        #expect(text.contains(RouteRights.markdown), "docs/security.md should hold:\n\(RouteRights.markdown)")
    }

    /// The keys a caller of the NH API may hold.
    enum Key: String, CaseIterable, CustomStringConvertible {
        case none, badSignature, listen, send, full, otherHubsFull
        var description: String { rawValue }

        /// What herald-auth verifies it to hold; nil: refused (no header, a bad signature, a key of another hub).
        var rights: HubRights? {
            switch self {
            case .none, .badSignature, .otherHubsFull: nil
            case .listen: .listen
            case .send: .send
            case .full: [.listen, .send, .manage]
            }
        }

        var header: String? {
            self == .none
                ? nil
                : "SharedAccessSignature sr=http%3a%2f%2flocalhost%2fapp1&sig=c2lnbmF0dXJl&se=4102444800&skn=\(rawValue)"
        }
    }

    /// herald-auth's verdict on a key, as the fake answers it.
    static func verdict(_ request: AuthorizeSasRequest) throws -> [HubRight] {
        let name = request.authorization.components(separatedBy: "skn=").last ?? ""
        guard let key = Key(rawValue: name), let rights = key.rights else {
            throw ServiceError(.unauthenticated, "InvalidSignature")
        }
        return [HubRight.listen, .send, .manage].filter { rights.contains(HubRights([$0])) }
    }

    static let nhRows = RouteRights.table.filter {
        switch $0.needs {
        case .key, .manageOrOneHandle: true
        default: false
        }
    }

    static func uri(_ row: RouteRights.Row, query: String = "") -> String {
        row.path.replacingOccurrences(of: "{hub}", with: "app1").replacingOccurrences(of: "{id}", with: "r1")
            .replacingOccurrences(of: "{tag}", with: "news").replacingOccurrences(of: "{user}", with: "u1")
            + query
    }

    /// The status of `row` called with `key` (and `query`).
    static func status(_ client: any TestClientProtocol, _ row: RouteRights.Row, _ key: Key, query: String = "")
        async throws -> HTTPResponse.Status
    {
        var headers: HTTPFields = [.contentType: "application/xml"]
        if let header = key.header { headers[.authorization] = header }
        let method = try #require(HTTPRequest.Method(row.method))
        let body = ["POST", "PUT", "PATCH"].contains(row.method) ? ByteBuffer(string: "{}") : nil
        return try await client.execute(uri: uri(row, query: query), method: method, headers: headers, body: body) {
            $0.status
        }
    }

    @Test(
        "each Notification Hubs route lets through exactly the keys its row names (none, a bad signature, Listen, Send, Full, another hub's)",
        arguments: nhRows.map(\.route))
    func keys(route: String) async throws {
        let row = try #require(RouteRights.table.first { $0.route == route })
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let services = FakeServices(hubRegistrations: RegistrationHandlers(store: store), sasVerdict: Self.verdict)
        try await EdgeRouteTests.withEdge(services) { client in
            for key in Key.allCases {
                let held = key.rights
                switch row.needs {
                case .key(let needs):
                    let status = try await Self.status(client, row, key)
                    let allowed = held.map { $0.isSuperset(of: needs) } ?? false
                    #expect(
                        allowed == ![.unauthorized, .forbidden].contains(status),
                        "\(route) with \(key): \(status.code)")
                case .manageOrOneHandle:
                    // The whole feed: Manage only.
                    let whole = try await Self.status(client, row, key)
                    #expect(
                        (held?.contains(.manage) ?? false) == (whole == .ok), "\(route) with \(key): \(whole.code)")
                    // One handle: Listen suffices.
                    let one = try await Self.status(
                        client, row, key,
                        query: "?$filter=" + "ChannelUri eq 'abcd'".addingPercentEncoding(
                            withAllowedCharacters: .alphanumerics)!)
                    #expect(
                        (held?.contains(.listen) ?? false) == (one == .ok),
                        "\(route) by handle with \(key): \(one.code)")
                    // Parameters that would widen it are never a read.
                    for filter in ["ChannelUri eq ''", "ChannelUri eq ' '", "ChannelUri eq '*'", "*"] {
                        let widened = try await Self.status(
                            client, row, key,
                            query: "?$filter=" + filter.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)
                        if held?.contains(.manage) != true {
                            #expect(widened != .ok || filter.contains("'*'"), "\(route) $filter=\(filter) with \(key)")
                        }
                    }
                default:
                    Issue.record("\(route) is not an NH row")
                }
            }
        }
    }
}
