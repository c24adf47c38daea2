import Edge
import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import NotificationHubs
import Testing

@testable import EdgeTestSupport

/// NH's routes in-process over fake services (the base of the test pyramid): what the edge itself decides, from
/// the SAS header to NH's XML errors, without a process. NotificationHubsTests and NHConformanceTests
/// drive the same routes through a live stack.
@Suite("NH routes over fake services", .watchedForStalls)
struct NHRouteTests {
    static let token =
        "SharedAccessSignature sr=localhost%2Fapp1&sig=c2ln&se=4102444800&skn=DefaultListenSharedAccessSignature"
    static let installation = #"{"installationId":"i1","platform":"fcmv1","pushChannel":"fcm-1"}"#

    static func body(_ response: TestResponse) -> String { String(buffer: response.body) }

    @Test("no Authorization: NH's 401 XML naming the token it needs, and no RPC")
    func missingToken() async throws {
        let services = FakeServices()
        try await EdgeRouteTests.withEdge(services) { client in
            try await client.execute(uri: "/app1/installations/i1", method: .get) { response in
                #expect(response.status == .unauthorized)
                #expect(
                    Self.body(response).hasPrefix("<Error><Code>401</Code><Detail>MissingToken"),
                    "\(Self.body(response))")
                #expect(services.requestIDs.isEmpty)
            }
        }
    }

    @Test("a hub name NH could not have is 404 before auth is asked")
    func badHubName() async throws {
        let services = FakeServices()
        try await EdgeRouteTests.withEdge(services) { client in
            try await client.execute(
                uri: "/-bad-/installations/i1", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(response.status == .notFound)
                #expect(services.requestIDs.isEmpty)
            }
        }
    }

    @Test(
        "a key without the route's right is NH's 401 naming the claim and the key's rights",
        arguments: [("/app1/installations", HTTPRequest.Method.get, "Manage"), ("/app1/users/u1", .delete, "Manage")])
    func missingClaim(uri: String, method: HTTPRequest.Method, claim: String) async throws {
        try await EdgeRouteTests.withEdge(FakeServices(sasRights: [.listen])) { client in
            try await client.execute(uri: uri, method: method, headers: [.authorization: Self.token]) { response in
                #expect(response.status == .unauthorized)
                let text = Self.body(response)
                #expect(text.contains("'\(claim)' claim(s) are required") && text.contains("has Listen"), "\(text)")
            }
        }
    }

    @Test("PUT of an installation with Listen: 200, empty, Content-Location naming it")
    func putInstallation() async throws {
        try await EdgeRouteTests.withEdge(FakeServices(sasRights: [.listen])) { client in
            try await client.execute(
                uri: "/app1/installations/i1?api-version=2020-06", method: .put, headers: [.authorization: Self.token],
                body: ByteBuffer(string: Self.installation)
            ) { response in
                #expect(response.status == .ok)
                #expect(response.body.readableBytes == 0)
                let location = try #require(response.headers[.contentLocation])
                #expect(location.contains("/app1/installations/i1"), "\(location)")
            }
        }
    }

    @Test(
        "registration's errors become NH's XML with the status NH uses",
        arguments: [
            (ServiceError(.notFound, "Installation not found."), 404),
            (ServiceError(.invalidArgument, "bad channel"), 400),
            (ServiceError(.unavailable, "down"), 503),
        ] as [(ServiceError, Int)])
    func registrationErrors(error: ServiceError, status: Int) async throws {
        try await EdgeRouteTests.withEdge(FakeServices(registrationError: error)) { client in
            try await client.execute(
                uri: "/app1/installations/i1", method: .get, headers: [.authorization: Self.token]
            ) { response in
                #expect(Int(response.status.code) == status)
                #expect(Self.body(response).hasPrefix("<Error><Code>\(status)</Code>"), "\(Self.body(response))")
            }
        }
    }
}
