import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import StackTestSupport
import Testing

/// Where Herald answered differently from Notification Hubs (a conformance probe written from
/// Microsoft's REST docs and the official SDKs found these): each now answers as NH does.
@Suite("NH conformance: answers as NH gives them", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct NHConformanceTests {
    @Test(
        "401 with NH's claim text for a missing right; TrackingId echoed and x-ms-correlation-request-id; GET installation's Content-Location; the .NET sr without the port"
    )
    func headersAndRights() async throws {
        try await LiveStack.with { live in
            let keys = try await NHFixture.hub("conf", live)
            let hostName = live.edge.base.host!
            let host = "\(hostName):\(live.edge.base.port!)"
            let root = NHFixture.encode("http://\(host)/", lower: false)
            let full = NHFixture.token(sr: root, keys.full)
            let listen = NHFixture.token(sr: root, keys.listen)
            func call(
                _ method: String, _ target: String, _ authorization: String?, body: String? = nil,
                headers: [(String, String)] = []
            ) async throws -> EdgeClient.Reply {
                try await live.edge.request(
                    method, target, authorization: authorization, bytes: body.map { Data($0.utf8) },
                    contentType: "application/json",
                    headers: headers)
            }
            let path = "/conf/installations/dev-1"
            let installation =
                #"{"installationId":"dev-1","platform":"apns","pushChannel":"\#(apnsToken(1201))","tags":["conf"]}"#

            // The .NET SDK on an http endpoint with a port signs sr without it (UriBuilder drops it).
            let dotnet = NHFixture.token(
                sr: NHFixture.encode("http://\(hostName)\(path)/".lowercased(), lower: true), keys.full)
            let put = try await call("PUT", path + "?api-version=2020-06", dotnet, body: installation)
            #expect(put.status == 200, "\(put.text)")
            // …but a token for another port, or another host, is still not for this one.
            for other in ["http://\(hostName):1\(path)/", "http://other.example\(path)/"] {
                let token = NHFixture.token(sr: NHFixture.encode(other, lower: true), keys.full)
                #expect(try await call("GET", path, token).status == 401, "\(other)")
            }

            // GET answers with Content-Location, as PUT does.
            let got = try await call("GET", path, listen)
            #expect(got.status == 200)
            #expect(got.header("Content-Location") == "http://\(host)\(path)")

            // TrackingId: the caller's echoed (.NET sends a fresh GUID per request), else one of
            // Herald's; x-ms-correlation-request-id on every answer, errors included.
            let tracking = "6b1f3c5e-8d2a-4f7b-9c0e-1a2b3c4d5e6f"
            let echoed = try await call("GET", path, listen, headers: [("TrackingId", tracking)])
            #expect(echoed.header("TrackingId") == tracking)
            #expect(echoed.header("x-ms-correlation-request-id") == tracking)
            let missing = try await call("GET", "/conf/installations/nope", listen, headers: [("TrackingId", tracking)])
            #expect(missing.status == 404 && missing.text.contains("TrackingId:\(tracking),"), "\(missing.text)")
            let own = try await call("GET", path, listen)
            let ownID = try #require(own.header("TrackingId"))
            #expect(!ownID.isEmpty && own.header("x-ms-correlation-request-id") == ownID)
            let hostile = try await call(
                "GET", path, listen, headers: [("TrackingId", String(repeating: "x", count: 300))])
            #expect(hostile.header("TrackingId")?.count ?? 0 <= 128, "a tracking id is bounded")

            // A missing right: 401 with NH's words (the JS SDK branches on 401), never 403.
            let query = try await call("GET", "/conf/installations", listen)
            #expect(
                query.status == 401 && query.text.contains("'Manage' claim(s) are required"),
                "\(query.status) \(query.text)")
            let send = try await call(
                "POST", "/conf/messages", listen, body: #"{"aps":{"alert":"x"}}"#,
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(
                send.status == 401 && send.text.contains("'Send' claim(s) are required"), "\(send.status) \(send.text)")
            #expect(send.header("WWW-Authenticate") == nil)
            _ = full
        }
    }

    @Test(
        "a template send without ServiceBusNotification-Format; telemetry with NotificationBody; Apns-Expiry in the docs' W3C and the .NET forms"
    )
    func sends() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            func post(_ target: String, body: String, headers: [(String, String)]) async throws -> EdgeClient.Reply {
                try await NHFixture.post(live, target, full, body: body, headers: headers)
            }
            let handle = apnsToken(1211)
            let template = #"{\"aps\":{\"alert\":\"$(msg)\"}}"#
            let installation =
                #"{"installationId":"t-1","platform":"apns","pushChannel":"\#(handle)","tags":["conf"],"templates":{"t":{"body":"\#(template)"}}}"#
            let put = try await live.edge.request(
                "PUT", "/default/installations/t-1",
                authorization: NHFixture.token(sr: NHFixture.root(live), full),
                bytes: Data(installation.utf8), contentType: "application/json")
            #expect(put.status == 200, "\(put.text)")

            // The docs mark the format header optional for template sends.
            let properties = #"{"msg":"Storm <warning> & 'more'"}"#
            let sent = try await post(
                "/default/messages", body: properties, headers: [("ServiceBusNotification-Tags", "conf")])
            #expect(sent.status == 201, "\(sent.text)")
            let id = try NHFixture.id(sent.header("Location"))
            let outcome = try await NHFixture.finalOutcome(live, notification: id)
            #expect(outcome.state == .completed, "\(outcome)")
            let push = fixture.double.requests.first { $0.path == "/3/device/\(handle)" }
            #expect(
                push.map { String(decoding: $0.body, as: UTF8.self) }
                    == #"{"aps":{"alert":"Storm <warning> & 'more'"}}"#)

            // Telemetry carries the body as sent, XML-escaped, between EndTime and TargetPlatforms.
            let details = try await live.edge.request(
                "GET", "/default/messages/\(id)?api-version=2016-07",
                authorization: NHFixture.token(sr: NHFixture.root(live), full))
            #expect(details.status == 200)
            let escaped = xmlEscaped(properties, quotes: false)
            #expect(details.text.contains("<NotificationBody>\(escaped)</NotificationBody>"), "\(details.text)")
            let order = ["<EndTime>", "<NotificationBody>", "<TargetPlatforms>"].compactMap {
                details.text.range(of: $0)?.lowerBound
            }
            #expect(order.count == 3 && order[0] < order[1] && order[1] < order[2], "\(details.text)")

            // Apns-Expiry: the docs' W3C form (minutes, an offset) and the .NET SDK's invariant form.
            // Two days ahead, on a whole minute (within APNs' one-year cap), in each spelling.
            let expected = (Int64(Date().timeIntervalSince1970) / 60 + 2 * 24 * 60) * 60
            func spelled(_ format: String, offset: Int) -> String {
                let formatter = DateFormatter()
                formatter.locale = Locale(identifier: "en_US_POSIX")
                formatter.timeZone = TimeZone(secondsFromGMT: offset)
                formatter.dateFormat = format
                return formatter.string(from: Date(timeIntervalSince1970: TimeInterval(expected)))
            }
            for (n, (expiry, seconds)) in [
                (spelled("yyyy-MM-dd'T'HH:mm:ssxxx", offset: 3600), expected),
                (spelled("yyyy-MM-dd'T'HH:mmxxx", offset: 3600), expected),
                (spelled("MM/dd/yyyy HH:mm:ss", offset: 0), expected),
            ].enumerated() {
                let device = apnsToken(1220 + n)
                let direct = try await post(
                    "/default/messages?direct", body: #"{"aps":{"alert":"e\#(n)"}}"#,
                    headers: [
                        ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-DeviceHandle", device),
                        ("ServiceBusNotification-Apns-Expiry", expiry),
                    ])
                #expect(direct.status == 201, "\(expiry): \(direct.text)")
                _ = try await NHFixture.finalOutcome(
                    live, notification: try NHFixture.id(direct.header("Location")))
                let pushed = fixture.double.requests.first { $0.path == "/3/device/\(device)" }
                // Herald keeps the expiry as a time to live from the send: a second either way.
                let expiration = pushed?.header("apns-expiration").flatMap { Int64($0) }
                #expect(
                    expiration.map { abs($0 - seconds) <= 1 } == true, "\(expiry): \(String(describing: expiration))")
            }
        }
    }
}
