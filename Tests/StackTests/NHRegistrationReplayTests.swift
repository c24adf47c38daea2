import Foundation
import HeraldTestSupport
import StackTestSupport
import Testing

/// NH's Registrations API as three SDKs call it, replayed as HTTP against a live stack: the
/// requests (paths, query spellings, headers, Atom bodies, If-Match forms) are the ones each SDK's
/// source builds, and each answer is checked the way that SDK reads it (docs/notification-hubs.md,
/// "Registrations", names the source lines). The .NET steps are the tutorial AppBackend's
/// RegisterController: CreateRegistrationIdAsync → GetRegistrationsByChannelAsync →
/// CreateOrUpdateRegistrationAsync(AppleRegistrationDescription(handle, ["username:…"])) → a send
/// to that tag → DeleteRegistrationAsync.
@Suite("NH registrations as the .NET, JS and Java SDKs send them", .watchedForStalls)
struct NHRegistrationReplayTests {
    static let atomEntry = "application/atom+xml;type=entry;charset=utf-8"
    static let ns =
        #"xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect""#

    static func withHub(_ body: (LiveStack, _ full: String, _ listen: String) async throws -> Void) async throws {
        try await LiveStack.with { live in
            let keys = try await NHFixture.hub("default", live, create: false)
            let root = NHFixture.root(live)
            try await body(
                live, NHFixture.token(sr: root, keys.full),
                NHFixture.token(sr: root, keys.listen))
        }
    }

    static func ids(_ feed: String) -> [String] {
        feed.matches(of: /<RegistrationId>([^<]+)</).map { String($0.1) }
    }

    @Test(".NET (api-version 2017-04): the AppBackend's register flow, its send by username tag, and its delete")
    func dotnetAppBackend() async throws {
        try await Self.withHub { live, full, listen in
            let handle = apnsToken(4001)
            func tracking() -> [(String, String)] { [("TrackingId", UUID().uuidString)] }
            // CreateRegistrationIdAsync: the id is Location's 4th segment when Segments[2] is "registrationids/".
            let created = try await live.edge.request(
                "POST", "/default/registrationids?api-version=2017-04", authorization: full, bytes: nil,
                contentType: "application/xml", headers: tracking())
            #expect(created.status == 201)
            let location = try #require(created.header("Location").flatMap(URL.init(string:)))
            #expect(location.pathComponents.count == 4 && location.pathComponents[2] == "registrationids")
            let id = location.lastPathComponent
            // GetRegistrationsByChannelAsync(handle, 100): "&$filter=" + UrlEncode("ChannelUri eq '…'") + "&$top=100".
            let filter = "ChannelUri+eq+%27\(handle)%27"
            let empty = try await live.edge.request(
                "GET", "/default/registrations?api-version=2017-04&$filter=\(filter)&$top=100", authorization: full,
                bytes: nil, contentType: "application/xml", headers: tracking())
            #expect(empty.status == 200 && Self.ids(empty.text).isEmpty, "\(empty.text)")
            // CreateOrUpdateRegistrationAsync: PUT, no If-Match, RegistrationId nil, ExpirationTime nil.
            let body =
                #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleRegistrationDescription \#(Self.ns)><RegistrationId i:nil="true"/><Tags>username:alice</Tags><DeviceToken>\#(handle)</DeviceToken></AppleRegistrationDescription></content></entry>"#
            let put = try await live.edge.request(
                "PUT", "/default/registrations/\(id)?api-version=2017-04", authorization: full,
                bytes: Data(body.utf8), contentType: Self.atomEntry, headers: tracking())
            #expect(put.status == 200, "\(put.text)")
            #expect(put.header("ETag") == "W/\"1\"")
            #expect(put.header("Content-Type")?.hasPrefix("application/atom+xml;type=entry") == true)
            // ReadEntityAsync: <entry> root, <content>, then the description in DataContract order.
            #expect(put.text.hasPrefix("<entry "))
            #expect(
                put.text.contains(
                    "<ETag>1</ETag><ExpirationTime>9999-12-31T23:59:59.999Z</ExpirationTime><RegistrationId>\(id)</RegistrationId><Tags>username:alice</Tags><DeviceToken>\(handle)</DeviceToken>"
                ), "\(put.text)")
            // The back end's send to the user's tag (SendAppleNativeNotificationAsync) reaches it.
            let send = try await live.edge.request(
                "POST", "/default/messages?api-version=2017-04", authorization: full,
                bytes: Data(#"{"aps":{"alert":"hi"}}"#.utf8), contentType: "application/json;charset=utf-8",
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "username:alice"),
                ])
            #expect(send.status == 201, "\(send.text)")
            let entries = try await live.waitForInbox { $0.handle == handle }
            #expect(entries.count == 1)
            // The next registration of the same device finds it by channel.
            let found = try await live.edge.request(
                "GET", "/default/registrations?api-version=2017-04&$filter=\(filter)&$top=100", authorization: full,
                bytes: nil, contentType: "application/xml", headers: tracking())
            #expect(Self.ids(found.text) == [id])
            // A device's Listen key may not claim a user's tag.
            let claimed = try await live.edge.request(
                "PUT", "/default/registrations/stolen?api-version=2017-04", authorization: listen,
                bytes: Data(body.replacingOccurrences(of: "alice", with: "bob").utf8), contentType: Self.atomEntry)
            #expect(claimed.status == 400 && claimed.text.contains("username:"), "\(claimed.text)")
            // DeleteRegistrationAsync(id): If-Match "*", 200 expected.
            let deleted = try await live.edge.request(
                "DELETE", "/default/registrations/\(id)?api-version=2017-04", authorization: full, bytes: nil,
                contentType: "application/xml", headers: tracking() + [("If-Match", "*")])
            #expect(deleted.status == 200)
            let gone = try await live.edge.request(
                "GET", "/default/registrations/\(id)?api-version=2017-04", authorization: full)
            #expect(gone.status == 404 && gone.text.hasPrefix("<Error><Code>404</Code>"))
        }
    }

    @Test(
        "JS (api-version 2020-06): an Apple template and a browser registration created, updated by ETag, read, deleted"
    )
    func jsSDK() async throws {
        try await Self.withHub { live, _, listen in
            let handle = apnsToken(4002)
            // registrationSerializer.ts: XML declaration, <updated>, TemplateName before Expiry, CDATA body.
            let template =
                #"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><updated>2026-11-25T10:00:00.000Z</updated><content type="application/xml"><AppleTemplateRegistrationDescription \#(Self.ns)><Tags>news</Tags><DeviceToken>\#(handle)</DeviceToken><BodyTemplate><![CDATA[{"aps":{"alert":"$(m)"}}]]></BodyTemplate><TemplateName>t1</TemplateName><Expiry>2030-01-01T00:00:00.000Z</Expiry><ApnsHeaders><ApnsHeader><Header>apns-priority</Header><Value>5</Value></ApnsHeader></ApnsHeaders></AppleTemplateRegistrationDescription></content></entry>"#
            let created = try await live.edge.request(
                "POST", "/default/registrations?api-version=2020-06", authorization: listen,
                bytes: Data(template.utf8), contentType: Self.atomEntry,
                headers: [("x-ms-version", "2020-06")])
            #expect(created.status == 200, "\(created.text)")
            let id = try #require(Self.ids(created.text).first)
            // updateRegistration: PUT with if-match of the ETag it read.
            let update = try await live.edge.request(
                "PUT", "/default/registrations/\(id)?api-version=2020-06", authorization: listen,
                bytes: Data(
                    template.replacingOccurrences(of: "<Tags>news</Tags>", with: "<Tags>news,sport</Tags>").utf8),
                contentType: Self.atomEntry, headers: [("If-Match", "\"1\"")])
            #expect(update.status == 200 && update.header("ETag") == "W/\"2\"", "\(update.text)")
            let read = try await live.edge.request(
                "GET", "/default/registrations/\(id)?api-version=2020-06", authorization: listen)
            #expect(read.text.contains("<AppleTemplateRegistrationDescription "))
            #expect(read.text.contains("<Tags>news,sport</Tags>"))
            #expect(read.text.contains("<Expiry>2030-01-01T00:00:00.000Z</Expiry><TemplateName>t1</TemplateName>"))
            // The template send reaches it, rendered.
            let send = try await live.edge.request(
                "POST", "/default/messages?api-version=2020-06",
                authorization: NHFixture.token(
                    sr: NHFixture.root(live),
                    try await NHFixture.hub("default", live, create: false).full),
                bytes: Data(#"{"m":"templated"}"#.utf8), contentType: "application/json;charset=utf-8",
                headers: [("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-Tags", "sport")])
            #expect(send.status == 201, "\(send.text)")
            let pushed = try await live.waitForInbox { $0.handle == handle }
            #expect(pushed.count == 1)
            // A browser registration (Endpoint, P256DH, Auth).
            let browser =
                #"<?xml version="1.0" encoding="UTF-8" standalone="yes"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><BrowserRegistrationDescription \#(Self.ns)><Endpoint>https://fcm.googleapis.com/fcm/send/abc</Endpoint><P256DH>BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM</P256DH><Auth>tBHItJI5svbpez7KI4CCXg</Auth></BrowserRegistrationDescription></content></entry>"#
            let web = try await live.edge.request(
                "PUT", "/default/registrations/web-1?api-version=2020-06", authorization: listen,
                bytes: Data(browser.utf8), contentType: Self.atomEntry)
            #expect(web.status == 200, "\(web.text)")
            #expect(web.text.contains("<Endpoint>https://fcm.googleapis.com/fcm/send/abc</Endpoint><P256DH>"))
            for gone in [id, "web-1"] {
                let deleted = try await live.edge.request(
                    "DELETE", "/default/registrations/\(gone)?api-version=2020-06", authorization: listen, bytes: nil,
                    contentType: "application/xml", headers: [("If-Match", "*")])
                #expect(deleted.status == 200)
            }
        }
    }

    @Test("Java (api-version 2014-09): FcmV1 and Windows template registrations, W/ ETags, URLEncoder's filter, paging")
    func javaSDK() async throws {
        try await Self.withHub { live, full, _ in
            // NotificationHub.createRegistrationId: the id matched by (\S+)/registrationids/([^?]+).*
            let created = try await live.edge.request(
                "POST", "/default/registrationids?api-version=2014-09", authorization: full)
            #expect(created.status == 201)
            let location = try #require(created.header("Location"))
            let id = try #require(location.wholeMatch(of: /(\S+)\/registrationids\/([^?]+).*/)).2
            // FcmV1Registration.getXml: declaration, tags, the token as is.
            let token = "fcm-token:APA91b-\(id)"
            let fcm =
                #"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><FcmV1RegistrationDescription \#(Self.ns)><Tags>java,android</Tags><FcmV1RegistrationId>\#(token)</FcmV1RegistrationId></FcmV1RegistrationDescription></content></entry>"#
            let upsert = try await live.edge.request(
                "PUT", "/default/registrations/\(id)?api-version=2014-09", authorization: full,
                bytes: Data(fcm.utf8), contentType: "application/atom+xml; charset=UTF-8")
            #expect(upsert.status == 200, "\(upsert.text)")
            // updateRegistration: If-Match W/"etag".
            let update = try await live.edge.request(
                "PUT", "/default/registrations/\(id)?api-version=2014-09", authorization: full,
                bytes: Data(fcm.utf8), contentType: "application/atom+xml; charset=UTF-8",
                headers: [("If-Match", "W/\"1\"")])
            #expect(update.status == 200 && update.header("ETag") == "W/\"2\"")
            let stale = try await live.edge.request(
                "PUT", "/default/registrations/\(id)?api-version=2014-09", authorization: full,
                bytes: Data(fcm.utf8), contentType: "application/atom+xml; charset=UTF-8",
                headers: [("If-Match", "W/\"1\"")])
            #expect(stale.status == 412)
            // WindowsTemplateRegistration.getXml: ChannelUri, CDATA body, then WnsHeaders.
            let wns =
                #"<?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><WindowsTemplateRegistrationDescription \#(Self.ns)><Tags>java</Tags><ChannelUri>https://db5.notify.windows.com/?token=AwYAAAB</ChannelUri><BodyTemplate><![CDATA[<toast><visual><binding template="ToastText01"><text id="1">$(m)</text></binding></visual></toast>]]></BodyTemplate><WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders></WindowsTemplateRegistrationDescription></content></entry>"#
            let windows = try await live.edge.request(
                "POST", "/default/registrations?api-version=2014-09", authorization: full,
                bytes: Data(wns.utf8), contentType: "application/atom+xml; charset=UTF-8")
            #expect(windows.status == 200, "\(windows.text)")
            #expect(
                windows.text.contains(
                    "<WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders><TemplateName></TemplateName>"
                ), "\(windows.text)")
            // getRegistrationsByChannel: URLEncoder.encode("ChannelUri eq '…'") (spaces as +).
            let encoded = try #require(
                token.addingPercentEncoding(
                    withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-_."))))
            let byChannel = try await live.edge.request(
                "GET", "/default/registrations?api-version=2014-09&$filter=ChannelUri+eq+%27\(encoded)%27",
                authorization: full)
            #expect(Self.ids(byChannel.text) == [String(id)], "\(byChannel.text)")
            // getRegistrationsByTag with $top=1 and ContinuationToken from X-MS-ContinuationToken.
            var seen: [String] = []
            var continuation: String? = nil
            repeat {
                let page = try await live.edge.request(
                    "GET",
                    "/default/tags/java/registrations?api-version=2014-09&$top=1"
                        + (continuation.map { "&ContinuationToken=\($0)" } ?? ""), authorization: full)
                #expect(page.status == 200)
                seen += Self.ids(page.text)
                continuation = page.header("X-MS-ContinuationToken")
            } while continuation != nil && seen.count < 5
            #expect(seen.count == 2 && seen.contains(String(id)), "\(seen)")
            // deleteRegistration(registration): If-Match W/"etag"; 200 or 404 accepted.
            let deleted = try await live.edge.request(
                "DELETE", "/default/registrations/\(id)?api-version=2014-09", authorization: full, bytes: nil,
                contentType: "application/xml", headers: [("If-Match", "W/\"2\"")])
            #expect(deleted.status == 200)
        }
    }

    @Test("NH's older device SDKs: /Registrations/?$filter=channeluri+eq+'…' and PUT /Registrations/{id}")
    func olderDeviceSDK() async throws {
        try await Self.withHub { live, _, listen in
            let handle = apnsToken(4003)
            let body =
                #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><AppleRegistrationDescription \#(Self.ns)><Tags>a</Tags><DeviceToken>\#(handle)</DeviceToken></AppleRegistrationDescription></content></entry>"#
            let put = try await live.edge.request(
                "PUT", "/default/Registrations/old-1?api-version=2013-04", authorization: listen,
                bytes: Data(body.utf8), contentType: "application/atom+xml")
            #expect(put.status == 200, "\(put.text)")
            let list = try await live.edge.request(
                "GET", "/default/Registrations/?$filter=channeluri+eq+'\(handle)'&api-version=2013-04",
                authorization: listen)
            #expect(list.status == 200 && Self.ids(list.text) == ["old-1"], "\(list.status) \(list.text)")
        }
    }
}
