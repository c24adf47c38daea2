import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Testing

@testable import Edge
@testable import EdgeTestSupport

/// The console's routes in-process over fake services: the sign-in, and every page as the
/// services' answers render it (ConsoleTests drives the whole console in chromium against a real
/// stack).
@Suite("console routes over fake services", .watchedForStalls)
struct ConsoleRouteTests {
    @Test("the sign-in page sets its double-submit cookie under a strict CSP; the assets are served from here")
    func signInPage() async throws {
        try await EdgeRouteTests.withEdge { client in
            try await client.execute(uri: "/console/login", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/html") == true)
                let csp = try #require(response.headers[.contentSecurityPolicy])
                #expect(csp.contains("default-src 'self'") || csp.contains("default-src 'none'"), "\(csp)")
                let cookie = try #require(response.headers[.setCookie])
                #expect(cookie.hasPrefix("herald_signin=") && cookie.contains("HttpOnly"), "\(cookie)")
            }
            try await client.execute(uri: "/console/assets/console.css", method: .get) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType]?.hasPrefix("text/css") == true)
            }
        }
    }

    @Test("a page without a session sends the browser to sign in; a sign-in without the form's cookie is 403")
    func withoutSession() async throws {
        let services = FakeServices()
        try await EdgeRouteTests.withEdge(services) { client in
            try await client.execute(uri: "/console/hubs", method: .get) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/console/login?expired=1")
            }
            try await client.execute(
                uri: "/console/login", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: ByteBuffer(string: "_csrf=forged&user=alice&password=alice")
            ) { response in
                #expect(response.status == .forbidden)
                #expect(String(buffer: response.body).contains("CSRF"))
            }
        }
        // No credentials were tried: the forged form never reached herald-auth.
        #expect(services.requestIDs.isEmpty)
    }

    @Test(
        "a form body or query with raw spaces, < > and quotes is read, not a crash: each answers, the edge keeps serving"
    )
    func rawCharactersInForms() async throws {
        let services = FakeServices(userRights: [.listen, .send, .manage])
        try await EdgeRouteTests.withEdge(services) { client in
            // As curl --data-binary sends it: the edge died here on URLComponents' trapping setter.
            for body in ["user=a b&password=c d", #"user=<a>&password="x"%zz&=&&k"#, "user=%E2%82%AC+x&password=%"] {
                try await client.execute(
                    uri: "/console/login", method: .post,
                    headers: [.contentType: "application/x-www-form-urlencoded"], body: ByteBuffer(string: body)
                ) { response in
                    #expect(response.status == .forbidden, "\(body): \(response.status)")  // no CSRF cookie
                }
            }
            try await client.execute(
                uri: #"/console/hubs/default/devices?tag=a<b>&user="x" y"#, method: .get,
                headers: [.cookie: "herald_session=t-admin"]
            ) { response in
                #expect(response.status.code < 500, "\(response.status) \(String(buffer: response.body))")
            }
            _ = try await Self.page(client, "/console/hubs")
        }
    }

    @Test(
        "the sign-in form is URL-encoded and small: multipart (a part header with high bytes) is 415, a large body 413")
    func signInReadsOnlyAForm() async throws {
        let services = FakeServices()
        try await EdgeRouteTests.withEdge(services) { client in
            // multipart-kit 4.7.1 trapped on this part header name (0xC3 0xA9) and killed the edge.
            var body = ByteBuffer(string: "--B\r\n")
            body.writeBytes([0xC3, 0xA9])
            body.writeString(": x\r\n\r\nv\r\n--B--\r\n")
            try await client.execute(
                uri: "/console/login", method: .post, headers: [.contentType: "multipart/form-data; boundary=B"],
                body: body
            ) { response in
                #expect(response.status == .unsupportedMediaType, "\(response.status)")
            }
            // Larger than a sign-in form: refused by its declared length, then as it streams.
            let large = ByteBuffer(repeating: UInt8(ascii: "a"), count: ConsolePage.maxSignInBytes + 1)
            try await client.execute(
                uri: "/console/login", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: large
            ) { response in
                #expect(response.status == .contentTooLarge, "\(response.status)")
            }
            try await client.execute(
                uri: "/console/login", method: .post, headers: [.contentType: "text/plain"],
                body: ByteBuffer(string: "user=a&password=b")
            ) { response in
                #expect(response.status == .unsupportedMediaType, "\(response.status)")
            }
            #expect(services.requestIDs.isEmpty, "a refused sign-in reached herald-auth")
            _ = try await Self.page(client, "/console/hubs")
        }
    }

    @Test(
        "a signed-in multipart form is parsed only after its CSRF token in the query; hostile part headers are not a crash"
    )
    func multipartAfterCSRF() async throws {
        let services = FakeServices(userRights: [.listen, .send, .manage])
        let csrf = ConsoleSession(token: "t-admin", user: "alice", admin: true).csrf
        try await EdgeRouteTests.withEdge(services) { client in
            // A part whose header names are FF FE, and one with a name of high bytes.
            var body = ByteBuffer(string: "--B\r\n")
            body.writeBytes([0xFF, 0xFE])
            body.writeString(": x\r\n\r\nv\r\n--B\r\nContent-Disposition: form-data; name=\"")
            body.writeBytes([0xC3, 0xA9, 0xFF])
            body.writeString(
                "\"\r\n\r\nw\r\n--B\r\nContent-Disposition: form-data; name=\"_csrf\"\r\n\r\n\(csrf)\r\n--B--\r\n")
            let headers: HTTPFields = [
                .cookie: "herald_session=t-admin", .contentType: "multipart/form-data; boundary=B",
            ]
            // Without the token in the query, the body is not read: 403.
            try await client.execute(
                uri: "/console/hubs/default/credentials/apns", method: .post, headers: headers, body: body
            ) { response in
                #expect(response.status == .forbidden, "\(response.status)")
                #expect(String(buffer: response.body).contains("CSRF"))
            }
            try await client.execute(
                uri: "/console/hubs/default/credentials/apns?_csrf=forged", method: .post, headers: headers, body: body
            ) { response in
                #expect(response.status == .forbidden, "\(response.status)")
            }
            for uri in ["/console/hubs/default/credentials/apns", "/console/hubs/default/send"] {
                try await client.execute(uri: "\(uri)?_csrf=\(csrf)", method: .post, headers: headers, body: body) {
                    response in
                    #expect(response.status.code < 500, "\(uri): \(response.status) \(String(buffer: response.body))")
                }
            }
            _ = try await Self.page(client, "/console/hubs")
        }
    }

    @Test(
        "every page of a hub with hostile but allowed hub and key names: titles say the name, links keep each segment")
    func hostileNames() async throws {
        let keys = ["...", ".-_", "a..b", String(repeating: "k", count: 256), "DefaultFullSharedAccessSignature"]
        let hub = Hub(
            name: "a.b-c_d", createdAtUnixMs: 1_700_000_000_000,
            keys: keys.map { HubKey(name: $0, rights: [.listen, .send, .manage]) }, id: "h-9")
        let services = FakeServices(userRights: [.listen, .send, .manage], hubs: [FakeServices.hub, hub])
        try await EdgeRouteTests.withEdge(services) { client in
            let base = "/console/hubs/a.b-c_d"
            for (path, title) in [
                (base, "Hub a.b-c_d"), ("\(base)/devices", "Devices of a.b-c_d"),
                ("\(base)/send", "Test send on a.b-c_d"),
                ("\(base)/sends", "Sends on a.b-c_d"),
            ] {
                let page = try await Self.page(client, path)
                #expect(page.contains("<title>\(title)"), "\(path): \(page.prefix(400))")
                #expect(!page.contains("ConsoleHub("), "\(path) writes a Swift value out")
                // Every link and form action: no segment a URL parser resolves away.
                for match in page.matches(of: /(?:href|action)="([^"]*)"/) {
                    let segments = match.1.split(separator: "?").first?.split(separator: "/") ?? []
                    #expect(!segments.contains(".") && !segments.contains(".."), "\(path): \(match.1)")
                }
            }
            let hubPage = try await Self.page(client, base)
            for key in keys {
                #expect(hubPage.contains(#"action="\#(base)/keys/\#(key)/revoke""#), "key \(key)")
            }
        }
    }

    @Test(
        "a preview of a body that is a bare JSON value (1, \"x\", null) shows it, not a crash"
    )
    func previewOfAJSONFragment() async throws {
        let services = FakeServices(userRights: [.listen, .send, .manage])
        let csrf = ConsoleSession(token: "t-admin", user: "alice", admin: true).csrf
        try await EdgeRouteTests.withEdge(services) { client in
            for text in ["1", "%22x%22", "null", "true", "-0.5e3"] {
                let body = "_csrf=\(csrf)&target=tag&tag=news&kind=template&platform=apns&text=\(text)&action=preview"
                try await client.execute(
                    uri: "/console/hubs/default/send", method: .post,
                    headers: [.cookie: "herald_session=t-admin", .contentType: "application/x-www-form-urlencoded"],
                    body: ByteBuffer(string: body)
                ) { response in
                    #expect(response.status.code < 500, "\(text): \(response.status) \(String(buffer: response.body))")
                }
            }
            _ = try await Self.page(client, "/console/hubs")
        }
    }

    @Test("jsonData writes a bare value as itself and refuses what JSON cannot hold, where Foundation's writer traps")
    func jsonWriter() throws {
        #expect(String(decoding: try jsonData(NSNumber(value: 1)), as: UTF8.self) == "1")
        #expect(String(decoding: try jsonData("x"), as: UTF8.self) == #""x""#)
        #expect(throws: (any Error).self) { try jsonData(["a": Double.nan]) }
        #expect(throws: (any Error).self) { try jsonData([Date()]) }
    }

    /// An operator's page: the admin's session cookie (the fake grants Manage to any token).
    static func page(_ client: any TestClientProtocol, _ uri: String) async throws -> String {
        try await client.execute(uri: uri, method: .get, headers: [.cookie: "herald_session=t-admin"]) { response in
            #expect(response.status == .ok, "\(uri): \(response.status) \(String(buffer: response.body))")
            #expect(response.headers[.contentSecurityPolicy] != nil)
            return String(buffer: response.body)
        }
    }

    /// The text of every `<td>` in `html`, in order (the tables' cells).
    static func cells(_ html: String) -> [String] {
        html.components(separatedBy: "<td").dropFirst().map { cell in
            let inner = cell.drop { $0 != ">" }.dropFirst()
            return String(inner.prefix { $0 != "<" })
        }
    }

    @Test("every page of a hub renders what the services answer, each page's own values in their places")
    func pages() async throws {
        let services = FakeServices(userRights: [.listen, .send, .manage])
        try await EdgeRouteTests.withEdge(services) { client in
            let hubs = try await Self.page(client, "/console/hubs")
            #expect(hubs.contains(#"<a href="/console/hubs/default">default</a>"#), "\(hubs)")
            #expect(hubs.contains("Create a hub"), "the admin's form")
            #expect(hubs.contains(#"<span class="who">alice</span>"#))

            let hub = try await Self.page(client, "/console/hubs/default")
            #expect(hub.contains(#"<span class="badge failing">failing</span>"#), "\(hub)")
            #expect(hub.contains("<code>InvalidProviderToken</code>"))
            #expect(hub.contains("(set 2023-11-14 22:13:20Z)"), "the APNs row's set time")
            // FCM's row: no error, no set time.
            #expect(hub.contains("<td>none</td>"))
            #expect(hub.components(separatedBy: "(set ").count == 2)
            #expect(hub.contains("<code>DefaultFullSharedAccessSignature</code>: Listen, Manage, Send"))
            // The queue and the limits, as herald-dispatch answers them.
            #expect(hub.contains(#"<th scope="row">Deliveries waiting</th><td>1500</td>"#), "\(hub)")
            #expect(hub.contains(#"<th scope="row">Oldest due delivery has waited</th><td>2 s</td>"#))
            #expect(hub.contains("(this edge, since it started)</th><td>0</td>"))
            #expect(
                hub.contains(#"<th scope="row">Pushes a month (UTC)</th><td>1000000</td><td>45000 this month</td>"#))
            #expect(hub.contains(#"<th scope="row">Pushes a day (UTC)</th><td>none</td><td>1200 today</td>"#))
            #expect(hub.contains(#"<th scope="row">Weight in delivery claims</th><td>2</td>"#))
            // Round 2's forms: one per platform the services answer, with the setting
            // names the CLI takes; rotate and revoke per key; the apns credentials of the hub's own
            // may be deleted, fcm's (the inbox's) not.
            let csrf = ConsoleSession(token: "t-admin", user: "alice", admin: true).csrf
            for platform in ["apns", "fcm"] {
                #expect(
                    hub.contains(
                        #"action="/console/hubs/default/credentials/\#(platform)?_csrf=\#(csrf)" enctype="multipart/form-data""#
                    ))
            }
            #expect(hub.contains(#"name="key-id" type="text""#) && hub.contains(#"name="service-account" type="file""#))
            #expect(hub.contains(#"action="/console/hubs/default/keys/DefaultFullSharedAccessSignature/rotate""#))
            #expect(hub.contains("Delete apns credentials") && !hub.contains("Delete fcm credentials"))

            let devices = try await Self.page(client, "/console/hubs/default/devices?handle=zz")
            #expect(devices.contains("<code>r-1</code>") && devices.contains("<code>r-2</code>"), "\(devices)")
            // r-2 has no handle yet: its cell is empty, not the search's "zz".
            #expect(devices.components(separatedBy: #"<code>zz</code>"#).count == 1, "\(devices)")
            #expect(devices.contains(#"id="handle" name="handle" value="zz""#))
            #expect(!devices.contains("First page"), "no first-page link on the first page")

            let sends = try await Self.page(client, "/console/hubs/default/sends")
            #expect(sends.contains("2 sends, 120 delivered, 3 failed"), "\(sends)")
            #expect(sends.contains("<code>BadDeviceToken</code>: 3"))
            #expect(sends.contains("<svg class=\"chart\""))
            #expect(sends.contains("apns: 2 ok, 1 failed"))

            let outcome = try await Self.page(client, "/console/hubs/default/sends/n-1")
            #expect(outcome.contains("More deliveries"), "a full page links to the next")
            let cells = Self.cells(outcome)
            // The deliveries table: 9 cells a row after the per-platform table's 6 (its first column is a <th>).
            let delivered = Array(cells[6..<15])
            #expect(delivered[0] == "1" && delivered[2] == "Delivered", "\(delivered)")
            #expect(delivered[8] == "", "a delivered row has no next attempt, not the page's link: \(delivered)")
            let pending = Array(cells[15..<24])
            #expect(pending[2] == "Pending" && pending[8].hasPrefix("2023-11-14"), "\(pending)")
            #expect(!outcome.contains("Started "), "no start time: no sentence")

            let send = try await Self.page(client, "/console/hubs/default/send")
            #expect(send.contains(#"<option value="user" selected>"#), "\(send)")
            #expect(!send.contains(#"class="error""#))

            let inbox = try await Self.page(client, "/console/inbox")
            #expect(inbox.contains("apns-push-type: alert"), "\(inbox)")
            #expect(!inbox.contains("Older entries"))
        }
    }

    @Test("the hub page's waits in words")
    func durations() {
        #expect(ConsoleRoutes.durationText(milliseconds: 0) == "none")
        #expect(ConsoleRoutes.durationText(milliseconds: -5) == "none")
        #expect(ConsoleRoutes.durationText(milliseconds: 850) == "850 ms")
        #expect(ConsoleRoutes.durationText(milliseconds: 59_999) == "59 s")
        #expect(ConsoleRoutes.durationText(milliseconds: 200_000) == "3 min 20 s")
        #expect(ConsoleRoutes.durationText(milliseconds: 7_500_000) == "2 h 5 min")
        #expect(ConsoleRoutes.durationText(milliseconds: .max).hasSuffix(" min"))
    }

    @Test("a service's refusal is the error page with its status, inside the layout")
    func errorPage() async throws {
        let services = FakeServices(userRights: [.listen, .send, .manage])
        try await EdgeRouteTests.withEdge(services) { client in
            try await client.execute(
                uri: "/console/hubs/nowhere", method: .get, headers: [.cookie: "herald_session=t-admin"]
            ) { response in
                #expect(response.status == .notFound)
                let body = String(buffer: response.body)
                #expect(body.contains("<h1>404 Not Found</h1>") && body.contains("hub nowhere not found"), "\(body)")
                #expect(body.contains(#"<span class="who">alice</span>"#))
            }
        }
    }

    @Test(
        "a send looked up by id alone: dispatch is asked for any hub's only by the stack's admin, for the hubs an operator manages otherwise, and not at all for one who manages none"
    )
    func findSendScope() async throws {
        let appOne = Hub(name: "app-one", createdAtUnixMs: 1_700_000_000_000, id: "h-2")
        let services = FakeServices(
            userVerdict: { request in
                let token = request.authorization.replacingOccurrences(of: "Bearer t-", with: "")
                let manages = token == "admin" || (token == "alice" && request.hub == "app-one")
                return AuthenticateResponse(user: token, scheme: "bearer", rights: manages ? [.manage] : [])
            },
            hubs: [FakeServices.hub, appOne])
        try await EdgeRouteTests.withEdge(services) { client in
            for (session, location) in [
                ("t-admin", "/console/hubs/default/sends/n-1"), ("t-alice", "/console/hubs/app-one/sends/n-1"),
                ("t-bob", nil),
            ] {
                try await client.execute(
                    uri: "/console/sends/n-1", method: .get, headers: [.cookie: "herald_session=\(session)"]
                ) { response in
                    if let location {
                        #expect(response.status == .seeOther && response.headers[.location] == location, "\(session)")
                    } else {
                        #expect(response.status == .notFound, "\(session)")
                    }
                }
            }
        }
        let asked = services.outcomeRequests
        #expect(asked.count == 2, "bob's search reached dispatch: \(asked)")
        #expect(asked.first?.scope == .all && asked.first?.hubs == [])
        #expect(asked.last?.scope == .unspecified && asked.last?.hubs == ["h-2"])
    }

}
