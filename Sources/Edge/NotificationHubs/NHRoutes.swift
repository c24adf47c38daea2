import Foundation
import HTTPTypes
import HeraldClient
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldTelemetry
import Hummingbird
import NIOCore
import NotificationHubs
import Synchronization

/// Azure Notification Hubs' data plane on `/{hub}/…`, so NH's own SDKs work against Herald
/// unchanged (docs/notification-hubs.md says what is served and where Herald differs on purpose).
///
/// Every call carries a `SharedAccessSignature` checked by herald-auth (one RPC), then makes one
/// call to the service that owns the data. Status codes are the ones the SDKs check (PUT 200, PATCH
/// 200, DELETE 204 even when absent, sends 201 with `Location`); errors are NH's XML
/// `<Error><Code>…</Code><Detail>…</Detail></Error>`, 401 with NH's "'Send' claim(s) are
/// required" for a missing right (the JS SDK branches on 401; it retries a 403 as a throttle), and
/// 429 with `Retry-After` for throttling. Every answer carries `TrackingId` (the caller's, as .NET
/// sends one per request, else Herald's request id) and `x-ms-correlation-request-id`, which the JS
/// SDK reads. `api-version` and `x-ms-version` are accepted and not required.
package struct NotificationHubsRoutes: Sendable {
    let auth: any AuthServiceClientProtocol
    /// auth's SAS verdicts reused while they hold (see ``AuthVerdictCache``).
    let verdicts: AuthVerdictCache
    /// Each hub's request rate (429 with `Retry-After` beyond it).
    let rates: HubRateLimiter
    let registration: any RegistrationServiceClientProtocol
    /// For erasing a user of the hub, which reaches every service.
    let payload: any PayloadServiceClientProtocol
    let dispatch: any DispatchServiceClientProtocol
    let failures: DeliveryFailures
    let config: EdgeConfig

    func add(to router: Router<EdgeRequestContext>) {
        // Every NH route is under its hub: `/{hub}/…`.
        let hub = router.group(":hub")
        hub.put("installations/:id") { request, context in
            await nh(request, context) { try await putInstallation(request, context) }
        }
        hub.patch("installations/:id") { request, context in
            await nh(request, context) { try await patchInstallation(request, context) }
        }
        hub.get("installations/:id") { request, context in
            await nh(request, context) { try await getInstallation(request, context) }
        }
        hub.delete("installations/:id") { request, context in
            await nh(request, context) { try await deleteInstallation(request, context) }
        }
        hub.get("installations") { request, context in
            await nh(request, context) { try await listInstallations(request, context) }
        }
        hub.get("export") { request, context in
            await nh(request, context) { try await exportDevices(request, context) }
        }
        hub.delete("users/:user") { request, context in
            await nh(request, context) { try await eraseHubUser(request, context) }
        }
        hub.post("messages") { request, context in
            await nh(request, context) { try await nhSend(request, context) }
        }
        hub.post("messages/$batch") { request, context in
            await nh(request, context) { try await sendBatch(request, context) }
        }
        hub.get("messages/:id") { request, context in
            await nh(request, context) { try await notificationDetails(request, context) }
        }
        hub.get("messages/:id/failures") { request, context in
            await nh(request, context) {
                let hub = try await authorizeSAS(request, context, needs: .send)
                return try await failures.export(
                    id: try context.parameters.require("id"), requester: "", hub: hub, requestID: context.requestID)
            }
        }
        hub.post("schedulednotifications") { request, context in
            await nh(request, context) { try await schedule(request, context) }
        }
        hub.delete("schedulednotifications/:id") { request, context in
            await nh(request, context) { try await cancelScheduled(request, context) }
        }
        addRegistrationRoutes(to: hub)
    }

    /// Runs an NH route and answers its errors in NH's XML, through the edge's one status mapping;
    /// every answer gets the request's tracking id (``trackingID(_:_:)``).
    func nh(_ request: Request, _ context: EdgeRequestContext, _ body: () async throws -> Response) async -> Response {
        let tracking = Self.trackingID(request, context)
        // NH's tracking id is a correlation attribute of the request's span, never its trace id.
        HeraldTracing.annotate { $0["nh.tracking_id"] = tracking }
        var response: Response
        do {
            response = try await body()
        } catch {
            let edgeError: EdgeError
            switch error {
            case let e as EdgeError: edgeError = e
            case let e as ServiceError: edgeError = .from(e)
            default:
                context.logger.error(
                    "NH request failed unexpectedly", metadata: ["herald.error": "\(String(reflecting: error))"])
                edgeError = EdgeError(.internalServerError, "internal error")
            }
            response = NHError(edgeError).response(trackingID: tracking)
        }
        response.headers[.trackingID] = tracking
        response.headers[.correlationID] = tracking
        return response
    }

    /// The caller's `TrackingId` when it is a sane token (at most 128 of `A-Z a-z 0-9 - _ . :`;
    /// .NET sends a GUID), else the edge's request id, which the services' logs carry.
    static func trackingID(_ request: Request, _ context: EdgeRequestContext) -> String {
        EdgeErrorMiddleware.saneToken(
            request.headers.value(.trackingID), maxBytes: 128, alsoAllowed: [UInt8(ascii: "."), UInt8(ascii: ":")])
            ?? context.requestID
    }

    /// The hub named by the path and the rights of the request's SAS token on it; 401 (NH's
    /// "claim(s) are required") when the needed right is missing.
    @discardableResult
    func authorizeSAS(_ request: Request, _ context: EdgeRequestContext, needs right: HubRights) async throws -> String
    {
        try await authorizeSASAnswer(request, context, needs: right).hub
    }

    /// The scope of a read by a key with `rights` (as herald-auth verified them, not as the route
    /// asked for them): the whole hub for Manage; else, for a read by one handle, that handle;
    /// else none, which every hub-wide read refuses where the data is read.
    static func readScope(_ rights: HubRights, handle: String?) -> ReadScope {
        if rights.contains(.manage) { return .hub }
        if let handle, !handle.isEmpty { return .handle }
        return .unspecified
    }

    /// ``authorizeSAS(_:_:needs:)`` with herald-auth's whole answer (the hub's limits).
    func authorizeSASAnswer(
        _ request: Request, _ context: EdgeRequestContext, needs right: HubRights
    ) async throws -> (hub: String, answer: AuthorizeSasResponse) {
        let hub = try context.parameters.require("hub")
        guard Names.isValidHubName(hub) else {
            throw EdgeError(.notFound, "no hub \(hub): hub names are \(Names.hubNameRule)")
        }
        guard let header = request.headers.value(.authorization), !header.isEmpty else {
            throw EdgeError(
                .unauthorized,
                "MissingToken: the request needs Authorization: SharedAccessSignature sr=…&sig=…&se=…&skn=…")
        }
        let resource = (request.head.authority ?? "") + request.uri.path
        let answer = try await sasVerdict(
            AuthorizeSasRequest(hub: hub, authorization: header, resource: resource, clientAddress: context.remoteIP),
            requestID: context.requestID)
        // Manage's routes include a user's erase, which is audited: the key is its caller.
        if right.contains(.manage) {
            AuditTrail.caller("key:\(answer.keyName)")
            AuditTrail.hub(name: hub, id: answer.hubID)
        }
        guard answer.hubRights.isSuperset(of: right) else {
            // NH's answer and words for a missing claim.
            throw EdgeError(
                .unauthorized,
                "Unauthorized access. '\(right.names.joined(separator: ", "))' claim(s) are required to perform this operation (the key \(answer.keyName) has "
                    + "\(answer.hubRights.names.joined(separator: ", ")))")
        }
        try rates.admit(
            hub: answer.hubID, rate: RequestRate(perSecond: answer.requestsPerSecond, burst: answer.requestBurst))
        // From here on the hub is its immutable id (tenancy); URLs in answers keep the path's name.
        return (answer.hubID, answer)
    }

    /// auth's answer to `request`: reused from ``verdicts`` while it holds and its audience covers
    /// this request's resource, else asked for (and kept when auth allows). A token used on a
    /// resource it does not cover always reaches auth, which refuses it and counts the failure.
    func sasVerdict(_ request: AuthorizeSasRequest, requestID: String) async throws -> AuthorizeSasResponse {
        let lookup = verdicts.lookup(request)
        if case .hit(let answer) = lookup, SASAudience.covers(answer.audience, resource: request.resource) {
            AuthVerdictCache.fromCache.increment()
            return answer
        }
        let answer = try await auth.authorizeSas(request, requestID: requestID)
        AuthVerdictCache.fromAuth.increment()
        // A kept answer that does not cover this resource stays kept for the resources it does.
        if case .miss(let key, let generation?) = lookup { verdicts.store(answer, key: key, generation: generation) }
        return answer
    }

    // MARK: installations

    /// `PUT /{hub}/installations/{id}`: create or replace. 200, empty body, `Content-Location`.
    func putInstallation(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        try await writeInstallation(request, context) { hub, id, body, limit in
            // NH's JSON read here, as a registration's XML is; registration validates the rest.
            let installation = try Installation.read(body, id: id)
            _ = try await registration.putInstallation(
                PutInstallationRequest(
                    hub: hub, installationID: id, maxInstallations: limit, installation: installation.message,
                    emptyAnswer: true),
                requestID: context.requestID)
        }
    }

    /// `PATCH /{hub}/installations/{id}`: JSON-Patch, `application/json-patch+json` or `application/json`. 200.
    func patchInstallation(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        try await writeInstallation(request, context) { hub, id, body, _ in
            _ = try await registration.patchInstallation(
                PatchInstallationRequest(
                    hub: hub, installationID: id, operations: try Installation.patchOperations(body),
                    emptyAnswer: true),
                requestID: context.requestID)
        }
    }

    /// A write with Listen: the body to `call`, then NH's empty 200 with `Content-Location`.
    private func writeInstallation(
        _ request: Request, _ context: EdgeRequestContext, _ call: (String, String, [UInt8], Int64) async throws -> Void
    ) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .listen)
        let id = try context.parameters.require("id")
        try await call(
            hub, id, [UInt8](try await EdgeHTTP.collect(request, upTo: config.maxBodyBytes)), answer.maxInstallations)
        return Self.nhEmpty(.ok, contentLocation: Self.contentLocation(request, id: id))
    }

    /// `GET /{hub}/installations/{id}`: the installation's JSON with `Content-Location`, or 404.
    func getInstallation(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .listen)
        let id = try context.parameters.require("id")
        let answer = try await registration.getInstallation(
            GetInstallationRequest(hub: hub, installationID: id), requestID: context.requestID)
        // NH's JSON written here from the typed answer; an older herald-registration sends only
        // its JSON (until 2027-03-01).
        var response = Self.rawJSON(try answer.installation.map { try Installation(answer: $0).json() } ?? answer.json)
        response.headers[.contentLocation] = Self.contentLocation(request, id: id)
        return response
    }

    /// `DELETE /{hub}/installations/{id}`: 204 whether or not it existed, as NH.
    func deleteInstallation(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .listen)
        _ = try await registration.deleteInstallation(
            DeleteInstallationRequest(hub: hub, installationID: try context.parameters.require("id")),
            requestID: context.requestID)
        return Self.nhEmpty(.noContent)
    }

    /// `GET /{hub}/installations?tag=&userId=&platform=&top=&continuationToken=` (Manage): not in NH.
    /// `{"installations":[…],"continuationToken":"…"}`; the token also in `x-ms-continuationtoken`.
    func listInstallations(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (hub, verdict) = try await authorizeSASAnswer(request, context, needs: .manage)
        let query = request.uri.queryParameters
        var platform = Platform.unspecified
        if let name = query.get("platform"), !name.isEmpty {
            platform = try Self.nhPlatform(name)
        }
        var limit: Int32 = 100
        if let top = query.get("top") ?? query.get("$top") {
            guard let value = Names.positiveInteger(top), value <= 1000 else {
                throw EdgeError(.badRequest, "top must be 1 to 1000")
            }
            limit = Int32(clamping: value)
        }
        let answer = try await registration.listInstallations(
            ListInstallationsRequest(
                hub: hub, tag: query.get("tag") ?? "", userID: query.get("userId") ?? query.get("userID") ?? "",
                platform: platform,
                continuationToken: query.get("continuationToken") ?? query.get("ContinuationToken") ?? "", limit: limit,
                scope: Self.readScope(verdict.hubRights, handle: nil)),
            requestID: context.requestID)
        var body: [UInt8] = Array(#"{"installations":["#.utf8)
        // From the typed items; an older herald-registration sends only their JSON (until 2027-03-01).
        let installations =
            answer.items.isEmpty ? answer.installations : try answer.items.map { try Installation(answer: $0).json() }
        for (index, installation) in installations.enumerated() {
            if index > 0 { body.append(UInt8(ascii: ",")) }
            body += installation
        }
        body += Array("],\"continuationToken\":\(jsonStringLiteral(answer.continuationToken))}".utf8)
        var response = Self.rawJSON(body)
        if !answer.continuationToken.isEmpty {
            response.headers[.continuationToken] = answer.continuationToken
        }
        return response
    }

    /// `GET /{hub}/export` (Manage): every registration and installation of the hub as NDJSON,
    /// streamed in batches as herald-registration reads them.
    func exportDevices(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .manage)
        let collected = Mutex<[UInt8]>([])
        try await registration.exportDevices(
            ExportDevicesRequest(hub: hub, scope: Self.readScope(answer.hubRights, handle: nil)),
            requestID: context.requestID, timeout: .seconds(600)
        ) {
            batch in collected.withLock { $0 += batch.ndjson }
        }
        let lines = collected.withLock { $0 }
        return Response(
            status: .ok, headers: [.contentType: "application/x-ndjson"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: lines)))
    }

    /// `DELETE /{hub}/users/{userId}` (Manage): not in NH. Erases every device of the hub whose
    /// userId or `$UserId:{…}` tag is `userId`, their delivery records and inbox entries, and the
    /// user's name in the hub's sends; cancels scheduled sends to them alone (``UserErasure``).
    /// Idempotent; answers 200 with the counts.
    func eraseHubUser(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .manage)
        let user = try context.parameters.require("user")
        guard !user.isEmpty, user.utf8.count <= 256 else {
            throw EdgeError(.badRequest, "userId must be 1 to 256 bytes")
        }
        let report = try await UserErasure.run(
            user: user, hub: hub, auth: auth, registration: registration, payload: payload, dispatch: dispatch,
            requestID: context.requestID)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return Self.rawJSON(Array(try encoder.encode(report)))
    }

    // MARK: sends

    // MARK: helpers

    static func nhPlatform(_ name: String) throws -> Platform {
        guard let platform = NHPlatformNames.installation(name) else {
            throw EdgeError(.badRequest, "platform must be apns, fcmv1, wns or browser")
        }
        return platform
    }

    /// NH answers `application/xml` even with no body; the SDKs read only the status.
    static func nhEmpty(_ status: HTTPResponse.Status, contentLocation: String? = nil) -> Response {
        var headers: HTTPFields = [.contentType: "application/xml; charset=utf-8"]
        if let contentLocation { headers[.contentLocation] = contentLocation }
        return Response(status: status, headers: headers)
    }

    /// JSON bytes as they are. NH labels its JSON `application/xml`; Herald says what it is (the
    /// SDKs parse the body whatever the label).
    static func rawJSON(_ bytes: [UInt8]) -> Response {
        Response(
            status: .ok, headers: [.contentType: "application/json; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
    }

    static func origin(_ request: Request) -> String {
        "\(request.uri.scheme.map { "\($0)" } ?? "http")://\(request.head.authority ?? "localhost")"
    }

    static func contentLocation(_ request: Request, id: String) -> String {
        "\(origin(request))/\(pathHub(request))/installations/\(id)"
    }

    /// The hub as the request's path spells it (its first segment), for the URLs NH answers with;
    /// RPCs take the hub's id instead.
    static func pathHub(_ request: Request) -> Substring {
        request.uri.path.split(separator: "/", maxSplits: 1).first ?? ""
    }
}

/// NH's error body: `<Error><Code>401</Code><Detail>…TrackingId:…,TimeStamp:…</Detail></Error>`.
struct NHError {
    var error: EdgeError

    init(_ error: EdgeError) { self.error = error }

    func response(trackingID: String) -> Response {
        var headers = error.headers
        headers[.wwwAuthenticate] = nil
        headers[.contentType] = "application/xml; charset=utf-8"
        let xml = NHErrorXML.body(status: error.status.code, message: error.message, trackingID: trackingID)
        return Response(status: error.status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(string: xml)))
    }
}
