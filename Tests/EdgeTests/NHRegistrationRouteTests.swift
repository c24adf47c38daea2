import Edge
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
import NotificationHubs
import RegistrationService
import Testing

@testable import EdgeTestSupport

/// NH's Registrations API in-process: the edge's routes over a real herald-registration on an
/// in-memory SQLite, with bodies as the .NET and JS SDKs write them and answers checked the way
/// they read them (docs/notification-hubs.md, "Registrations").
@Suite("NH registrations over a real registration service", .watchedForStalls)
struct NHRegistrationRouteTests {
    static let token = NHRouteTests.token
    static let deviceToken = String(repeating: "62BCD348", count: 8)
    static let atom = ["content-type": "application/atom+xml;type=entry;charset=utf-8"]

    /// An entry as the .NET SDK's DataContractSerializer writes it (RegistrationId nil, Tags joined).
    static func dotnetApple(tags: String = "tag1,tag2", token: String = deviceToken) -> String {
        #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleRegistrationDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><RegistrationId i:nil="true"/><Tags>"#
            + tags + "</Tags><DeviceToken>" + token
            + "</DeviceToken></AppleRegistrationDescription></content></entry>"
    }

    /// An Apple template as the JS SDK writes it: declaration, TemplateName before Expiry, CDATA body.
    static let jsAppleTemplate = #"""
        <?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-25T10:00:00.000Z</updated><content type="application/xml"><AppleTemplateRegistrationDescription xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><Tags>news,sports</Tags><PushVariables>{"locale":"fr"}</PushVariables><DeviceToken>\#(deviceToken)</DeviceToken><BodyTemplate><![CDATA[{"aps":{"alert":"$(message)"}}]]></BodyTemplate><TemplateName>greeting</TemplateName><Expiry>$(expiry)</Expiry><ApnsHeaders><ApnsHeader><Header>apns-push-type</Header><Value>alert</Value></ApnsHeader></ApnsHeaders></AppleTemplateRegistrationDescription></content></entry>
        """#

    static func withStack(
        rights: [HubRight] = [.listen], _ body: @Sendable (any TestClientProtocol) async throws -> Void
    )
        async throws
    {
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        let services = FakeServices(sasRights: rights, hubRegistrations: RegistrationHandlers(store: store))
        try await EdgeRouteTests.withEdge(services, body)
    }

    static func text(_ response: TestResponse) -> String { String(buffer: response.body) }

    /// The element names inside the description, in order.
    static func elements(_ xml: String, of kind: String) -> [String] {
        guard let start = xml.range(of: "<\(kind) "), let end = xml.range(of: "</\(kind)>") else { return [] }
        return xml[start.upperBound..<end.lowerBound].matches(of: /<([A-Za-z]+)[ >\/]/).map { String($0.1) }
            .filter { !["ApnsHeader", "Header", "Value"].contains($0) }
    }

    @Test(".NET's sequence: registrationids, PUT, GET by channel, update, stale delete 412, delete, 404")
    func dotnetSequence() async throws {
        try await Self.withStack { client in
            var id = ""
            try await client.execute(
                uri: "/app1/registrationids?api-version=2017-04", method: .post,
                headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .created)
                // .NET: Segments.Length == 4 and Segments[2] == "registrationids/".
                let location = try #require(response.headers[.location].flatMap(URL.init(string:)))
                #expect(location.pathComponents.count == 4 && location.pathComponents[2] == "registrationids")
                id = location.lastPathComponent
                #expect(id.wholeMatch(of: /\d+-\d+-\d/) != nil, "\(id)")
            }
            try await client.execute(
                uri: "/app1/registrations/\(id)?api-version=2017-04", method: .put,
                headers: [.authorization: Self.token, .contentType: Self.atom["content-type"]!],
                body: ByteBuffer(string: Self.dotnetApple())
            ) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.eTag] == "W/\"1\"")
                let xml = Self.text(response)
                #expect(
                    xml.hasPrefix(#"<entry a:etag="W/&quot;1&quot;" xmlns="http://www.w3.org/2005/Atom""#), "\(xml)")
                #expect(
                    Self.elements(xml, of: "AppleRegistrationDescription")
                        == ["ETag", "ExpirationTime", "RegistrationId", "Tags", "DeviceToken"])
                #expect(xml.contains("<RegistrationId>\(id)</RegistrationId><Tags>tag1,tag2</Tags>"))
            }
            let filter = "ChannelUri eq '\(Self.deviceToken)'".addingPercentEncoding(
                withAllowedCharacters: .alphanumerics)!
            try await client.execute(
                uri: "/app1/registrations?api-version=2017-04&$filter=\(filter)&$top=100", method: .get,
                headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("application/atom+xml;type=feed") == true)
                let xml = Self.text(response)
                #expect(
                    xml.hasPrefix(
                        #"<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Registrations</title>"#))
                #expect(xml.components(separatedBy: "<entry ").count == 2, "\(xml)")
            }
            try await client.execute(
                uri: "/app1/registrations/\(id)", method: .put,
                headers: [.authorization: Self.token, .ifMatch: "\"1\""],
                body: ByteBuffer(string: Self.dotnetApple(tags: "tag3"))
            ) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.eTag] == "W/\"2\"")
            }
            for stale in ["\"1\"", "W/\"1\""] {
                try await client.execute(
                    uri: "/app1/registrations/\(id)", method: .delete,
                    headers: [.authorization: Self.token, .ifMatch: stale]
                ) { response in
                    #expect(response.status == .preconditionFailed)
                    #expect(Self.text(response).hasPrefix("<Error><Code>412</Code>"))
                }
            }
            try await client.execute(
                uri: "/app1/registrations/\(id)", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .ok)
                #expect(Self.text(response).contains("<Tags>tag3</Tags>"))
            }
            try await client.execute(
                uri: "/app1/registrations/\(id)", method: .delete, headers: [.authorization: Self.token, .ifMatch: "*"]
            ) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(
                uri: "/app1/registrations/\(id)", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .notFound)
                #expect(Self.text(response).hasPrefix("<Error><Code>404</Code>"))
            }
        }
    }

    @Test("the JS SDK's Apple template: created by POST, read back with every field in .NET's order")
    func jsTemplate() async throws {
        try await Self.withStack { client in
            var url = ""
            try await client.execute(
                uri: "/app1/registrations?api-version=2020-06", method: .post,
                headers: [.authorization: Self.token], body: ByteBuffer(string: Self.jsAppleTemplate)
            ) { response in
                #expect(response.status == .ok)
                url = try #require(response.headers[.contentLocation])
            }
            let path = try #require(URL(string: url)).path
            try await client.execute(uri: path, method: .get, headers: [.authorization: Self.token]) { response in
                let xml = Self.text(response)
                #expect(
                    Self.elements(xml, of: "AppleTemplateRegistrationDescription") == [
                        "ETag", "ExpirationTime", "RegistrationId", "Tags", "PushVariables", "DeviceToken",
                        "BodyTemplate", "Expiry", "TemplateName", "ApnsHeaders",
                    ], "\(xml)")
                #expect(xml.contains(#"<BodyTemplate><![CDATA[{"aps":{"alert":"$(message)"}}]]></BodyTemplate>"#))
                #expect(xml.contains("<Expiry>$(expiry)</Expiry><TemplateName>greeting</TemplateName>"))
                #expect(
                    xml.contains(
                        "<ApnsHeaders><ApnsHeader><Header>apns-push-type</Header><Value>alert</Value></ApnsHeader></ApnsHeaders>"
                    ))
                #expect(xml.contains(#"<PushVariables>{"locale":"fr"}</PushVariables>"#))
            }
        }
    }

    @Test("listing a hub or a tag needs Manage (NH's 401); with it, $top pages through x-ms-continuationtoken")
    func listingAndPaging() async throws {
        try await Self.withStack { client in
            try await client.execute(
                uri: "/app1/registrations", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .unauthorized)
                #expect(Self.text(response).contains("'Manage' claim(s) are required"))
            }
        }
        try await Self.withStack(rights: [.listen, .manage]) { client in
            for n in 0..<3 {
                let token = String(repeating: "0\(n)", count: 32)
                try await client.execute(
                    uri: "/app1/registrations/reg-\(n)", method: .put, headers: [.authorization: Self.token],
                    body: ByteBuffer(string: Self.dotnetApple(tags: n == 1 ? "odd" : "even", token: token))
                ) { response in #expect(response.status == .ok) }
            }
            var seen: [String] = []
            var continuation = ""
            for _ in 0..<4 {
                let query = continuation.isEmpty ? "" : "&continuationtoken=\(continuation)"
                try await client.execute(
                    uri: "/app1/registrations?$top=2\(query)", method: .get, headers: [.authorization: Self.token]
                ) { response in
                    #expect(response.status == .ok)
                    seen += Self.text(response).matches(of: /<RegistrationId>([^<]+)</).map { String($0.1) }
                    continuation = response.headers[HTTPField.Name("x-ms-continuationtoken")!] ?? ""
                }
                if continuation.isEmpty { break }
            }
            #expect(seen == ["reg-0", "reg-1", "reg-2"])
            try await client.execute(
                uri: "/app1/tags/even/registrations", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(
                    Self.text(response).matches(of: /<RegistrationId>([^<]+)</).map { String($0.1) } == [
                        "reg-0", "reg-2",
                    ])
            }
        }
    }

    @Test(
        "a registration and an installation with one id are both listed once, whatever $top is"
    )
    func pagingAcrossSharedIDs() async throws {
        let store = try await SQLRegistrationStore(
            db: SQLiteDatabase(DatabaseQueue(configuration: HeraldDatabase.configuration)))
        // The fake auth answers the path's hub as its id (tenancy by id).
        for n in 0..<4 {
            _ = try await store.putHubRegistration(
                hub: "app1",
                HubRegistration(
                    registrationID: "id-\(n)", platform: .apns, handle: String(repeating: "0\(n)", count: 32)),
                ifMatch: 0, createOnly: false, maxRegistrations: 0)
            // Installations id-1 and id-2 share their ids with registrations.
            if n == 1 || n == 2 {
                _ = try await store.putInstallation(
                    hub: "app1",
                    Installation(installationID: "id-\(n)", userID: "u", platform: .fcm, pushChannel: "fcm-\(n)"))
            }
        }
        let services = FakeServices(
            sasRights: [.listen, .manage], hubRegistrations: RegistrationHandlers(store: store))
        try await EdgeRouteTests.withEdge(services) { client in
            for top in [1, 2, 3, 1000] {
                var seen: [String] = []
                var continuation = ""
                for _ in 0..<10 {
                    let query = continuation.isEmpty ? "" : "&continuationtoken=\(continuation)"
                    try await client.execute(
                        uri: "/app1/registrations?$top=\(top)\(query)", method: .get,
                        headers: [.authorization: Self.token]
                    ) { response in
                        #expect(response.status == .ok)
                        seen += Self.text(response).matches(of: /<(DeviceToken|FcmV1RegistrationId)>([^<]+)</).map {
                            String($0.2)
                        }
                        continuation = response.headers[HTTPField.Name("x-ms-continuationtoken")!] ?? ""
                    }
                    if continuation.isEmpty { break }
                }
                #expect(seen.count == 6, "$top=\(top): \(seen)")
                #expect(Set(seen).count == 6, "$top=\(top): \(seen)")
            }
            // A token Herald did not write is 400, not a page from somewhere.
            for bad in ["a~b~c", "a~", String(repeating: "x", count: 400)] {
                try await client.execute(
                    uri: "/app1/registrations?continuationtoken=\(bad)", method: .get,
                    headers: [.authorization: Self.token]
                ) { response in #expect(response.status == .badRequest, "\(bad.prefix(20))") }
            }
        }
    }

    @Test(
        "a Listen key's filter by an empty or blank handle is 400, not the hub's whole feed"
    )
    func emptyHandleFilter() async throws {
        try await Self.withStack { client in
            for n in 0..<2 {
                try await client.execute(
                    uri: "/app1/registrations/reg-\(n)", method: .put, headers: [.authorization: Self.token],
                    body: ByteBuffer(
                        string: Self.dotnetApple(tags: "even", token: String(repeating: "0\(n)", count: 32)))
                ) { response in #expect(response.status == .ok) }
            }
            for filter in ["ChannelUri eq ''", "ChannelUri eq '   '", "DeviceToken+eq+''"] {
                let encoded = filter.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? ""
                for path in ["/app1/registrations", "/app1/tags/even/registrations"] {
                    try await client.execute(
                        uri: "\(path)?$filter=\(encoded)", method: .get, headers: [.authorization: Self.token]
                    ) { response in
                        #expect(response.status == .badRequest, "\(path) \(filter): \(response.status)")
                        #expect(!Self.text(response).contains("<RegistrationId>"), "\(path) \(filter) read the feed")
                    }
                }
            }
        }
    }

    @Test(
        "hostile or unsupported bodies are 400 with NH's XML naming the problem; nothing is stored",
        arguments: [
            (#"<!DOCTYPE x [<!ENTITY a "aaaa">]><entry/>"#, "DTD"),
            ("<entry><content><AppleRegistrationDescription><DeviceToken>", "Atom XML"),
            ("<feed/>", "the root element is"),
            (
                "<entry><content><MpnsRegistrationDescription><ChannelUri>https://x</ChannelUri></MpnsRegistrationDescription></content></entry>",
                "not supported"
            ),
            (
                "<entry><content><GcmRegistrationDescription><GcmRegistrationId>t</GcmRegistrationId></GcmRegistrationDescription></content></entry>",
                "FcmV1RegistrationDescription"
            ),
            ("<entry><content><AppleRegistrationDescription/></content></entry>", "needs DeviceToken"),
            (
                "<entry><content><AppleRegistrationDescription><DeviceToken>zz</DeviceToken></AppleRegistrationDescription></content></entry>",
                "hex"
            ),
            (
                "<entry><content><AppleRegistrationDescription><Tags>$InstallationId:bob</Tags><DeviceToken>\(deviceToken)</DeviceToken></AppleRegistrationDescription></content></entry>",
                "is invalid"
            ),
            (
                "<entry><content>" + String(repeating: "<a>", count: 20) + String(repeating: "</a>", count: 20)
                    + "</content></entry>", "levels"
            ),
        ])
    func hostileBodies(body: String, words: String) async throws {
        try await Self.withStack(rights: [.listen, .manage]) { client in
            try await client.execute(
                uri: "/app1/registrations/r1", method: .put, headers: [.authorization: Self.token],
                body: ByteBuffer(string: body)
            ) { response in
                #expect(response.status == .badRequest)
                #expect(Self.text(response).contains(words), "\(Self.text(response))")
            }
            try await client.execute(uri: "/app1/registrations", method: .get, headers: [.authorization: Self.token]) {
                response in
                #expect(!Self.text(response).contains("<entry"))
            }
        }
    }

    @Test("an element name that is not UTF-8 (FoundationXML traps on it) and a declared non-UTF-8 encoding are 400")
    func notUTF8() async throws {
        let seed = try Data(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("FuzzCorpus/nhregistration/regression-invalid-utf8-name"))
        let declared = #"<?xml version="1.0" encoding="ISO-8859-1"?><entry/>"#
        try await Self.withStack { client in
            for body in [ByteBuffer(bytes: seed), ByteBuffer(string: declared)] {
                try await client.execute(
                    uri: "/app1/registrations/r1", method: .put, headers: [.authorization: Self.token], body: body
                ) { response in
                    #expect(response.status == .badRequest)
                    #expect(Self.text(response).contains("UTF-8"), "\(Self.text(response))")
                }
            }
        }
    }

    @Test("a feed of large templates is cut at about 4 MB per page and continues from there")
    func largePages() async throws {
        let body = #"{"aps":{"alert":""# + String(repeating: "x", count: 60_000) + #""}}"#
        try await Self.withStack(rights: [.listen, .manage]) { client in
            for n in 0..<80 {
                let entry =
                    "<entry><content><AppleTemplateRegistrationDescription><Tags>big</Tags><DeviceToken>\(Self.deviceToken)</DeviceToken>"
                    + "<BodyTemplate><![CDATA[\(body)]]></BodyTemplate></AppleTemplateRegistrationDescription></content></entry>"
                try await client.execute(
                    uri: "/app1/registrations/big-\(String(format: "%02d", n))", method: .put,
                    headers: [.authorization: Self.token], body: ByteBuffer(string: entry)
                ) { response in #expect(response.status == .ok) }
            }
            var seen = 0
            var pages = 0
            var continuation = ""
            repeat {
                let query = continuation.isEmpty ? "" : "&continuationtoken=\(continuation)"
                try await client.execute(
                    uri: "/app1/registrations?$top=1000\(query)", method: .get, headers: [.authorization: Self.token]
                ) { response in
                    #expect(response.status == .ok)
                    #expect(response.body.readableBytes < 6 << 20)
                    seen += Self.text(response).matches(of: /<RegistrationId>/).count
                    continuation = response.headers[HTTPField.Name("x-ms-continuationtoken")!] ?? ""
                }
                pages += 1
            } while !continuation.isEmpty && pages < 10
            #expect(seen == 80 && pages == 2, "\(seen) in \(pages) pages")
        }
    }

    @Test("If-Match on a missing registration is 404; an If-Match no ETag could be is 412")
    func ifMatchEdges() async throws {
        try await Self.withStack { client in
            try await client.execute(
                uri: "/app1/registrations/none", method: .put,
                headers: [.authorization: Self.token, .ifMatch: "\"3\""],
                body: ByteBuffer(string: Self.dotnetApple())
            ) { response in #expect(response.status == .notFound) }
            try await client.execute(
                uri: "/app1/registrations/none", method: .delete,
                headers: [.authorization: Self.token, .ifMatch: "\"abc\""]
            ) { response in #expect(response.status == .preconditionFailed) }
        }
    }
}
