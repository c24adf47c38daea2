import Edge
import Foundation
import HTTPTypes
import HeraldModel
import HeraldRPC
import Hummingbird
import HummingbirdTesting
import Testing

/// The console's routes in-process over fake services: what holds before any service is asked for
/// a hub (ConsoleTests drives the whole console in chromium against a real stack).
@Suite("console routes over fake services")
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
}
