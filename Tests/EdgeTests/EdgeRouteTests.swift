import Edge
import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import Hummingbird
import HummingbirdTesting
import Logging
import RegistrationService
import Synchronization
import Testing

@testable import EdgeTestSupport

/// The edge's routes in-process (HummingbirdTesting's `.router`) over fake service clients: every
/// status mapping and the request id, without starting a process. The full-stack suites in
/// StackTests cover the flows.
@Suite("edge routes over fake services", .watchedForStalls)
struct EdgeRouteTests {
    static let alice = "Basic " + Data("alice:alice".utf8).base64EncodedString()

    /// Builds the edge's router over `services` and runs `body` with a test client.
    static func withEdge(
        _ services: FakeServices = FakeServices(), profile: String = "rich", testMode: Bool = false,
        _ body: @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        let router = try services.router(profile: profile, testMode: testMode)
        try await Application(router: router).test(.router) { client in try await body(client) }
    }

    @Test("without X-Request-Id the edge makes one id and every RPC of the request carries it")
    func oneRequestIDWhenTheClientSendsNone() async throws {
        let services = FakeServices()
        try await Self.withEdge(services) { client in
            try await client.execute(uri: "/api/notifications/7", method: .get, headers: [.authorization: Self.alice]) {
                response in
                #expect(response.status == .ok)
                let id = try #require(response.headers[HTTPField.Name("X-Request-Id")!])
                #expect(!id.isEmpty)
                #expect(
                    services.requestIDs == [id, id],
                    "auth and payload saw \(services.requestIDs), the answer says \(id)")
            }
        }
    }

    @Test("a sane X-Request-Id from the client is the one every RPC carries")
    func clientRequestIDIsKept() async throws {
        let services = FakeServices()
        try await Self.withEdge(services) { client in
            try await client.execute(
                uri: "/api/notifications/7", method: .get,
                headers: [.authorization: Self.alice, HTTPField.Name("X-Request-Id")!: "trace-42"]
            ) { response in
                #expect(response.headers[HTTPField.Name("X-Request-Id")!] == "trace-42")
                #expect(services.requestIDs == ["trace-42", "trace-42"])
            }
        }
    }

    @Test(
        "each RPC status becomes its HTTP status with a JSON body",
        arguments: [
            (ServiceError(.notFound, "no such content"), 404, nil),
            (ServiceError(.invalidArgument, "bad"), 400, nil),
            (ServiceError(.permissionDenied, "no"), 403, nil),
            (ServiceError(.unavailable, "down"), 503, "1"),
            (ServiceError(.deadlineExceeded, "slow"), 503, "1"),
            (ServiceError.storageFull, 507, "30"),
            (ServiceError(.internal, "secret detail"), 500, nil),
        ] as [(ServiceError, Int, String?)])
    func statusMapping(error: ServiceError, status: Int, retryAfter: String?) async throws {
        let services = FakeServices(payloadError: error)
        try await Self.withEdge(services) { client in
            try await client.execute(uri: "/api/notifications/7", method: .get, headers: [.authorization: Self.alice]) {
                response in
                #expect(response.status.code == status)
                #expect(response.headers[.contentType] == "application/json; charset=utf-8")
                #expect(response.headers[.retryAfter] == retryAfter)
                let body = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: String]
                let message = try #require(body?["message"])
                #expect(body?["error"] != nil)
                #expect(message.contains("secret") == false, "an internal error's detail stays in the log")
            }
        }
    }

    @Test("a refused login is 401 with a Basic challenge, and nothing else is called")
    func unauthenticated() async throws {
        let services = FakeServices(authError: ServiceError(.unauthenticated, "wrong password"))
        try await Self.withEdge(services) { client in
            try await client.execute(uri: "/api/notifications/7", method: .get, headers: [.authorization: Self.alice]) {
                response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.wwwAuthenticate] == #"Basic realm="herald""#)
                #expect(services.requestIDs.count == 1)
            }
            try await client.execute(uri: "/api/notifications/7", method: .get) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test("PUT api/register of a gone id is 410, as the tutorial's client expects")
    func goneRegistration() async throws {
        let services = FakeServices(registrationError: ServiceError(.notFound, "unknown id"))
        try await Self.withEdge(services) { client in
            try await client.execute(
                uri: "/api/register/r-1", method: .put,
                headers: [.authorization: Self.alice, .contentType: "application/json"],
                body: ByteBuffer(string: #"{"Platform":"apns","Handle":"abcd","Tags":[]}"#)
            ) { response in
                #expect(response.status == .gone)
            }
        }
    }

    @Test("a send refused by dispatch deletes the content it stored")
    func refusedSendDeletesContent() async throws {
        let services = FakeServices(dispatchError: ServiceError(.invalidArgument, "no"))
        try await Self.withEdge(services) { client in
            try await client.execute(uri: "/api/notifications", method: .post, headers: [.authorization: Self.alice]) {
                response in
                #expect(response.status == .badRequest)
                #expect(services.deleted == [7])
            }
        }
    }

    @Test("/v1 answers are typed JSON: camelCase, sorted keys, Notification Hubs' state names")
    func v1OutcomeBody() async throws {
        try await Self.withEdge(FakeServices()) { client in
            try await client.execute(
                uri: "/v1/notifications/n-1/outcome", method: .get, headers: [.authorization: Self.alice]
            ) {
                response in
                #expect(response.status == .ok)
                #expect(
                    String(buffer: response.body)
                        == #"{"createdAtUnixMs":1700000000000,"notificationId":"n-1","platforms":[{"failure":1,"failures":{"BadDeviceToken":1},"#
                        + #""pending":0,"platform":"apns","removedHandles":1,"retries":3,"success":2}],"state":"Completed"}"#
                )
            }
        }
    }

    @Test("/v1/test/* is 404 naming test-mode unless it is on, and makes no RPC")
    func testRoutesOff() async throws {
        let services = FakeServices()
        try await Self.withEdge(services) { client in
            for (uri, method) in [("/v1/test/inbox?handle=abc", HTTPRequest.Method.get), ("/v1/test/reset", .post)] {
                try await client.execute(uri: uri, method: method) { response in
                    #expect(response.status == .notFound)
                    #expect(String(buffer: response.body).contains("test-mode"), "\(String(buffer: response.body))")
                }
            }
        }
        #expect(services.resetCount == 0)
        #expect(services.inboxRequests.isEmpty)
    }

    @Test(
        "with test-mode, /v1/test/inbox lists one handle's pushes and /v1/test/reset resets every service, dispatch first"
    )
    func testRoutesOn() async throws {
        let services = FakeServices()
        try await Self.withEdge(services, testMode: true) { client in
            try await client.execute(uri: "/v1/test/inbox?handle=abc&after=4&limit=2", method: .get) { response in
                #expect(response.status == .ok)
                let body = String(buffer: response.body)
                #expect(body.contains(#""handle":"abc""#), "\(body)")
                #expect(body.contains(#""payload":"{\"aps\":{}}""#), "\(body)")
                #expect(body.contains(#""headers":{"apns-push-type":"alert"}"#), "\(body)")
            }
            try await client.execute(uri: "/v1/test/inbox?limit=1001", method: .get) { response in
                #expect(response.status == .badRequest)
            }
            try await client.execute(uri: "/v1/test/reset", method: .post) { response in
                #expect(response.status == .ok)
                #expect(
                    String(buffer: response.body)
                        == #"{"deleted":{"auth":1,"dispatch":1,"payload":1,"registration":1}}"#)
            }
        }
        #expect(services.inboxRequests.map(\.handle) == ["abc"])
        #expect(services.inboxRequests.map(\.afterSequence) == [4])
        #expect(services.inboxRequests.map(\.limit) == [2])
        #expect(services.resetCount == 4)
    }

    @Test("/readyz names each service's health, 503 when one is not serving")
    func readiness() async throws {
        try await Self.withEdge(FakeServices(healthy: false)) { client in
            try await client.execute(uri: "/readyz", method: .get) { response in
                #expect(response.status == .serviceUnavailable)
                #expect(String(buffer: response.body).contains("NOT_SERVING"))
            }
        }
        try await Self.withEdge(FakeServices()) { client in
            try await client.execute(uri: "/readyz", method: .get) { response in #expect(response.status == .ok) }
        }
    }
}
