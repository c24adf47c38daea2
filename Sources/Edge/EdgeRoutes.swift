import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
public import HeraldRPC
import HeraldService
import HeraldTelemetry
public import Hummingbird
import Logging
import NIOCore

/// Every route of the edge, grouped by API: the tutorial's (``TutorialRoutes``), Herald's /v1
/// (``V1Routes``), Notification Hubs' (``NotificationHubsRoutes``), the web console
/// (``ConsoleRoutes``), the test routes (``TestRoutes``) and the probes and metrics
/// (``OperationsRoutes``). Each group is given only the clients it calls.
public struct EdgeRoutes: Sendable {
    public let auth: any AuthServiceClientProtocol
    public let registration: any RegistrationServiceClientProtocol
    public let payload: any PayloadServiceClientProtocol
    public let dispatch: any DispatchServiceClientProtocol
    /// grpc.health.v1 of each service, by name, for `/readyz`.
    public let health: [String: any HealthClientProtocol]
    public let config: EdgeConfig
    /// auth's answers reused while they hold (see ``AuthVerdictCache``); `.off` over fakes.
    public let verdicts: AuthVerdictCache

    /// The text a secure push stores, as in the tutorial.
    public static let secureText = "Secure confirmation."

    /// Over any clients: the services' own in production, fakes in the route tests.
    public init(
        auth: any AuthServiceClientProtocol, registration: any RegistrationServiceClientProtocol,
        payload: any PayloadServiceClientProtocol, dispatch: any DispatchServiceClientProtocol,
        health: [String: any HealthClientProtocol], config: EdgeConfig, verdicts: AuthVerdictCache = .off
    ) {
        self.auth = auth
        self.registration = registration
        self.payload = payload
        self.dispatch = dispatch
        self.health = health
        self.config = config
        self.verdicts = verdicts
    }

    /// Over the connections to the four services.
    public init(
        auth: RPCClient, registration: RPCClient, payload: RPCClient, dispatch: RPCClient, config: EdgeConfig,
        verdicts: AuthVerdictCache = .off
    ) {
        self.init(
            auth: AuthServiceClient(auth), registration: RegistrationServiceClient(registration),
            payload: PayloadServiceClient(payload), dispatch: DispatchServiceClient(dispatch),
            health: [
                ServiceName.auth.rawValue: HealthClient(auth),
                ServiceName.registration.rawValue: HealthClient(registration),
                ServiceName.payload.rawValue: HealthClient(payload),
                ServiceName.dispatch.rawValue: HealthClient(dispatch),
            ],
            config: config, verdicts: verdicts)
    }

    public func add(to router: Router<EdgeRequestContext>) {
        // A span per request when tracing is on (W3C traceparent honoured); the device handle in the
        // tutorial's `?handle=` stays out of the trace.
        let errors = EdgeErrorMiddleware(trustedProxies: config.trustedProxies)
        if let tracer = HeraldTracing.tracer {
            router.add(middleware: EdgeTracingMiddleware(tracer: tracer, errors: errors))
        } else {
            router.add(middleware: errors)
        }
        router.add(middleware: AuditMiddleware(auth: auth))
        let rates = HubRateLimiter(share: config.hubRateShare)
        let users = UserAuthentication(auth: auth, verdicts: verdicts, rates: rates)
        let content = ContentPush(payload: payload, dispatch: dispatch)
        let failures = DeliveryFailures(dispatch: dispatch)
        OperationsRoutes(health: health).add(to: router)
        TutorialRoutes(users: users, registration: registration, payload: payload, content: content, config: config)
            .add(to: router)
        V1Routes(users: users, auth: auth, content: content, dispatch: dispatch, failures: failures, config: config)
            .add(to: router)
        HubRoutes(users: users, auth: auth, registration: registration, dispatch: dispatch, config: config)
            .add(to: router)
        TestRoutes(auth: auth, registration: registration, payload: payload, dispatch: dispatch, config: config)
            .add(to: router)
        NotificationHubsRoutes(
            auth: auth, verdicts: verdicts, rates: rates, registration: registration, payload: payload,
            dispatch: dispatch, failures: failures, config: config
        ).add(to: router)
        ConsoleRoutes(
            users: users, auth: auth, registration: registration, dispatch: dispatch, content: content, config: config
        ).add(to: router)
    }
}

/// `GET /healthz`, `GET /readyz`, `GET /openapi.json`, `GET /metrics`: the probes, this API's
/// document and the edge's metrics, without credentials.
struct OperationsRoutes: Sendable {
    /// grpc.health.v1 of each service, by name, for `/readyz`.
    let health: [String: any HealthClientProtocol]

    func add(to router: Router<EdgeRequestContext>) {
        router.get("healthz") { _, _ in EdgeHTTP.json(#"{"status":"ok"}"#) }
        router.get("readyz") { _, _ in try await readiness() }
        router.get("openapi.json") { _, _ in EdgeHTTP.json(OpenAPIDocument.json) }
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: HeraldMetrics.contentType],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: HeraldMetrics.exposition())))
        }
    }

    /// `GET /readyz`: 200 when every service the edge calls answers SERVING on grpc.health.v1,
    /// else 503; the body names each service's status either way.
    func readiness() async throws -> Response {
        let statuses = await withTaskGroup(of: (String, String).self) { group in
            for (name, client) in health {
                group.addTask {
                    do {
                        let answer = try await client.check(HealthCheckRequest(service: ""), timeout: .seconds(1))
                        return (name, answer.status == .serving ? "SERVING" : "NOT_SERVING")
                    } catch {
                        return (name, "UNREACHABLE")
                    }
                }
            }
            return await group.reduce(into: [String: String]()) { $0[$1.0] = $1.1 }
        }
        let ready = statuses.values.allSatisfy { $0 == "SERVING" }
        return try EdgeHTTP.json(
            ReadinessBody(status: ready ? "ready" : "not ready", services: statuses),
            status: ready ? .ok : .serviceUnavailable)
    }
}

/// `GET /readyz`: each service's grpc.health.v1 status.
struct ReadinessBody: Encodable {
    var status: String
    var services: [String: String]
}

/// The secure-push answer, property names as the tutorial's ASP.NET backend wrote them.
struct SecureBody: Encodable {
    let Id: Int64
    let Payload: String
    let Read: Bool

    /// The body as `JSONEncoder` with sorted keys writes it, without the encoder: on the secure
    /// push's GET it was 6% of the edge's instructions (callgrind). A test holds the two equal.
    var json: String {
        #"{"Id":\#(Id),"Payload":\#(NativePayloads.jsonString(Payload)),"Read":\#(Read)}"#
    }
}
