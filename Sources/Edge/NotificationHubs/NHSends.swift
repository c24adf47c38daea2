import Foundation
import HTTPTypes
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import Hummingbird
import NIOCore
import NotificationHubs

/// Notification Hubs' sends and per-message telemetry on `/{hub}/messages…`
/// (docs/notification-hubs.md, "Sends" and "Telemetry"). Every variant is one `Send` to herald-dispatch, the engine the
/// tutorial's and `/v1` sends use too; what differs is only how the target and the payload are read
/// from NH's headers.
extension NotificationHubsRoutes {
    /// NH refuses a send request over 64 KB with 413, whatever a push service's own limit.
    static let nhMaxRequestBytes = 64 << 10
    /// Handles one batch send may name (NH's limit; herald-dispatch holds it too).
    static let nhBatchHandles = 1000
    /// NH's test send reaches at most this many devices.
    static let nhTestDevices = 10

    /// `POST /{hub}/messages` (Send): native sends to a tag expression
    /// (`ServiceBusNotification-Tags`), to every device of the hub, or with `?direct` to the handle
    /// in `ServiceBusNotification-DeviceHandle`; `?test` reaches at most 10 devices and answers
    /// their results. 201 with `Location: …/{hub}/messages/{id}?api-version=…` on every send.
    func nhSend(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .send)
        var send = try await nhSendRequest(request, hub: hub, key: answer.keyName)
        let test = request.uri.queryParameters.get("test").map { $0.lowercased() != "false" } ?? false
        if test { send.maxDevices = Int32(clamping: Self.nhTestDevices) }
        let outcome = try await sendAnswer(send, context)
        var response = Self.nhEmpty(.created)
        if test {
            response = try await testOutcome(outcome, hub: hub, context)
        }
        response.headers[.location] = Self.messageLocation(request, id: outcome.notificationID)
        return response
    }

    /// `POST /{hub}/schedulednotifications` (Send): the same send as `POST /{hub}/messages`, made at
    /// `ServiceBusNotification-ScheduleTime` (at most 7 days ahead; a time already past sends now).
    /// 201 with `Location: …/{hub}/schedulednotifications/{id}?api-version=…`; the id's telemetry
    /// says `Scheduled` until then.
    func schedule(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .send)
        guard let text = request.headers.value(.nhScheduleTime) else {
            throw EdgeError(
                .badRequest, "a scheduled send needs ServiceBusNotification-ScheduleTime, e.g. 2030-01-01T08:00:00Z")
        }
        guard let time = NHTime.parse(text).flatMap(TimeValue.unixMillis) else {
            throw EdgeError(
                .badRequest, "ServiceBusNotification-ScheduleTime \(text.prefix(64)) is not an ISO 8601 time")
        }
        var send = try await nhSendRequest(request, hub: hub, key: answer.keyName)
        send.scheduledAtUnixMs = time
        let outcome = try await sendAnswer(send, context)
        var response = Self.nhEmpty(.created)
        response.headers[.location] = Self.location(
            request, collection: "schedulednotifications", id: outcome.notificationID)
        return response
    }

    /// `DELETE /{hub}/schedulednotifications/{id}` (Send): cancels a scheduled send not made yet.
    /// 200 (also when it was cancelled before), 404 for an unknown id, 409 once it was sent.
    func cancelScheduled(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .send)
        let id = try context.parameters.require("id")
        guard id.hasPrefix("n-"), id.utf8.count <= 64 else {
            throw EdgeError(.notFound, "no scheduled notification \(id)")
        }
        do {
            _ = try await dispatch.cancelScheduled(
                CancelScheduledRequest(notificationID: id, hub: hub), requestID: context.requestID)
        } catch let error as ServiceError where error.code == .failedPrecondition {
            throw EdgeError(.conflict, error.message)
        }
        return Self.nhEmpty(.ok)
    }

    /// `POST /{hub}/messages/$batch?direct` (Send): one notification to up to 1000 handles, as
    /// multipart/mixed with a `notification` part and a `devices` part (a JSON array of handles).
    func sendBatch(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let (hub, answer) = try await authorizeSASAnswer(request, context, needs: .send)
        guard request.uri.queryParameters.get("direct") != nil else {
            throw EdgeError(.badRequest, "a batch send is a direct send: POST /{hub}/messages/$batch?direct")
        }
        // 1,000 handles do not fit NH's 64 KB (APNs tokens alone are 66 KB): the limit holds for
        // the notification part, and the request may carry the handles besides.
        let body = try await nhBody(request, limit: Self.nhMaxRequestBytes + Self.nhBatchHandles * 512)
        let parts = try NHBatch.parse(contentType: request.headers.value(.contentType) ?? "", body: [UInt8](body))
        guard parts.notification.count <= Self.nhMaxRequestBytes else {
            throw EdgeError(.contentTooLarge, "The message size cannot be over \(Self.nhMaxRequestBytes / 1024) Kb")
        }
        var headers = request.headers
        if let type = parts.notificationContentType { headers[.contentType] = type }
        let payload = try Self.nhPayload(headers, body: Data(parts.notification))
        let outcome = try await sendAnswer(
            SendRequest(
                payloads: [payload], hub: hub, deviceHandles: parts.devices, originalBody: parts.notification,
                principal: Principal(hubKey: answer.keyName)),
            context)
        var response = Self.nhEmpty(.created)
        // NH's recorded answer is `…/messages/$batch/{id}`, which breaks the JS SDK (it takes path
        // segment 3 as the id, "$batch"); `…/messages/{id}` is read right by .NET and Java (last
        // segment) and JS alike, and is where the send's telemetry is.
        response.headers[.location] = Self.location(
            request, collection: "messages", id: outcome.notificationID, query: "&direct")
        return response
    }

    /// `GET /{hub}/messages/{notificationId}` (Send): the send's `NotificationDetails` as NH's XML,
    /// elements in the order the .NET SDK's DataContract reads them. 404 for another hub's send.
    func notificationDetails(_ request: Request, _ context: EdgeRequestContext) async throws -> Response {
        let hub = try await authorizeSAS(request, context, needs: .send)
        let id = try context.parameters.require("id")
        guard id.hasPrefix("n-"), id.utf8.count <= 64 else { throw EdgeError(.notFound, "no notification \(id)") }
        let outcome = try await dispatch.getOutcome(
            GetOutcomeRequest(notificationID: id, hub: hub), requestID: context.requestID)
        let failures =
            outcome.platforms.contains { $0.failure > 0 }
            ? "\(Self.origin(request))/\(Self.pathHub(request))/messages/\(id)/failures" : nil
        let xml = NHTelemetry.details(outcome, location: Self.messageLocation(request, id: id), failures: failures)
        return Response(
            status: .ok, headers: [.contentType: "application/xml; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: xml)))
    }

    // MARK: parts

    /// The send an NH request asks for: its payload (``nhPayload(_:body:)``) and target: `?direct`
    /// with the device handle, `ServiceBusNotification-Tags`, or every device of the hub; sent by
    /// the hub's `key` (the SAS token's key name).
    private func nhSendRequest(_ request: Request, hub: String, key: String) async throws -> SendRequest {
        let body = try await nhBody(request)
        var send = SendRequest(hub: hub, originalBody: [UInt8](body), principal: Principal(hubKey: key))
        let format = request.headers.value(.nhFormat) ?? ""
        let direct = request.uri.queryParameters.get("direct") != nil
        if format.isEmpty, direct {
            throw EdgeError(
                .badRequest,
                "ServiceBusNotification-Format is required for a direct send: apple, fcmv1, windows or browser")
        }
        // NH's docs mark the header optional for template sends: no format is a template send.
        if format.isEmpty || format.lowercased() == "template" {
            send.templateSend = true
            send.templateProperties = try Self.templateProperties(body)
        } else {
            send.payloads = [try Self.nhPayload(request.headers, body: body)]
        }
        if direct {
            guard !send.templateSend else {
                throw EdgeError(.badRequest, "a template send goes to installations' templates; it cannot be direct")
            }
            send.deviceHandles = [try Self.directHandle(request.headers, platform: send.payloads[0].platform)]
        } else if let tags = request.headers.value(.nhTags), !tags.isEmpty {
            send.targetTag = tags
        } else {
            send.broadcast = true
        }
        return send
    }

    /// Sends and returns the outcome dispatch answered with.
    private func sendAnswer(_ send: SendRequest, _ context: EdgeRequestContext) async throws -> Outcome {
        guard let outcome = try await dispatch.send(send, requestID: context.requestID).outcome else {
            throw ServiceError(.internal, "dispatch answered Send without an outcome")
        }
        return outcome
    }

    /// The request body, refused with NH's 413 over 64 KB (or the edge's own limit when lower).
    private func nhBody(_ request: Request, limit: Int = nhMaxRequestBytes) async throws -> Data {
        let limit = limit == Self.nhMaxRequestBytes ? min(config.maxBodyBytes, limit) : limit
        let body: Data
        do {
            body = try await EdgeHTTP.collect(request, upTo: limit)
        } catch let error as EdgeError where error.status == .contentTooLarge {
            throw EdgeError(.contentTooLarge, "The message size cannot be over \(limit / 1024) Kb")
        }
        guard !body.isEmpty else { throw EdgeError(.badRequest, "the body is the notification payload; it is empty") }
        return body
    }

    /// A test send's answer: waits (up to `nh-test-send-wait-ms`) for its deliveries to finish,
    /// then lists them as NH's `NotificationOutcome`.
    private func testOutcome(_ sent: Outcome, hub: String, _ context: EdgeRequestContext) async throws -> Response {
        var outcome = sent
        let deadline = ContinuousClock.now + config.nhTestSendWait
        while [.enqueued, .processing].contains(outcome.state), ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            outcome = try await dispatch.getOutcome(
                GetOutcomeRequest(notificationID: sent.notificationID, hub: hub), requestID: context.requestID)
        }
        let deliveries =
            outcome.state == .noTargetFound
            ? []
            : try await dispatch.listDeliveries(
                ListDeliveriesRequest(
                    notificationID: sent.notificationID, limit: Int32(clamping: Self.nhTestDevices), hub: hub),
                requestID: context.requestID
            ).deliveries
        return Response(
            status: .created, headers: [.contentType: "application/xml; charset=utf-8"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: NHTelemetry.testOutcome(deliveries))))
    }

    static let nhDefaultAPIVersion = "2020-06"

    static func messageLocation(_ request: Request, id: String) -> String {
        location(request, collection: "messages", id: id)
    }

    /// `…/{hub}/{collection}/{id}?api-version=…` with the request's api-version, as NH answers:
    /// clients take the id from the last path segment, or by matching up to `?api-version=`.
    static func location(_ request: Request, collection: String, id: String, query: String = "") -> String {
        let apiVersion = request.uri.queryParameters.get("api-version") ?? nhDefaultAPIVersion
        return "\(origin(request))/\(pathHub(request))/\(collection)/\(id)?api-version=\(apiVersion)\(query)"
    }

    /// The push handle of a direct send: `ServiceBusNotification-DeviceHandle`; for Web Push the
    /// endpoint there and the keys in `P256DH` and `Auth`, as the JS SDK sends them.
    package static func directHandle(_ headers: HTTPFields, platform: Platform) throws -> String {
        guard let handle = headers.value(.nhDeviceHandle), !handle.isEmpty else {
            throw EdgeError(.badRequest, "a direct send needs ServiceBusNotification-DeviceHandle")
        }
        guard platform == .browser else { return handle }
        guard let p256dh = headers.value(.webPushP256DH), let auth = headers.value(.webPushAuth) else {
            throw EdgeError(
                .badRequest, "a direct browser send needs the subscription's keys in the P256DH and Auth headers")
        }
        let subscription: [String: Any] = ["endpoint": handle, "keys": ["p256dh": p256dh, "auth": auth]]
        let json = try jsonData(subscription, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(decoding: json, as: UTF8.self)
    }

    /// The native payload of an NH send: `ServiceBusNotification-Format`, and the platform headers
    /// NH passes on as ``NHHeaders`` reads them (the same rules as an installation template's).
    package static func nhPayload(_ headers: HTTPFields, body: Data) throws -> NativePayload {
        do {
            return try NHSendPayload.native(
                header: { HTTPField.Name($0).flatMap { headers[$0] } }, body: [UInt8](body), nowMillis: unixMillis())
        } catch let error as ServiceError {
            throw EdgeError(.badRequest, error.message)
        }
    }

    /// A template send's body: a JSON object of properties. NH documents string values; numbers are
    /// taken as their text too.
    static func templateProperties(_ body: Data) throws -> [Setting] {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any] else {
            throw EdgeError(.badRequest, #"a template send's body is a JSON object of properties: {"message":"Hello"}"#)
        }
        return try object.keys.sorted().map { name in
            guard name.utf8.count <= PushTemplate.maxPropertyNameLength else {
                throw EdgeError(
                    .badRequest,
                    "property \(name.prefix(40))… is longer than \(PushTemplate.maxPropertyNameLength) characters")
            }
            switch object[name] {
            case let text as String: return Setting(name: name, value: text)
            case let number as NSNumber: return Setting(name: name, value: number.stringValue)
            default:
                throw EdgeError(.badRequest, "property \(name) must be a string (NH's template properties are strings)")
            }
        }
    }
}
