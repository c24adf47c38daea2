import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import Hummingbird

/// The console's pages: each reads what it shows through the services' RPCs and renders one
/// template. Nothing here is stored by the edge.
extension ConsoleRoutes {
    // MARK: hubs

    func hubsPage(_ context: EdgeRequestContext, _ session: ConsoleSession) async throws -> Response {
        var rows: [ConsoleView.Hubs.Row] = []
        for hub in try await managedHubs(session, context) {
            rows.append(
                ConsoleView.Hubs.Row(
                    name: hub.name, path: "/console/hubs/\(ConsolePage.pathComponent(hub.name))",
                    created: ConsolePage.time(hub.createdAtUnixMs), keys: hub.keys.map(\.name).joined(separator: ", "),
                    limit: Self.limitText(hub.maxInstallations)))
        }
        return ConsolePage.render(
            "hubs", title: "Hubs", session: session,
            view: ConsoleView.Hubs(hubs: rows, admin: session.admin, csrf: session.csrf))
    }

    func createHub(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession) async throws
        -> Response
    {
        let form = try await ConsolePage.form(request, config, session: session)
        try Self.requireCSRF(form, session)
        try requireAdmin(session)
        var limit: Int64 = 0
        if let text = form["max_installations"], !text.isEmpty {
            guard let value = Int64(text), value >= 0 else {
                throw EdgeError(.badRequest, "the installation limit must be a whole number, 0 for none")
            }
            limit = value
        }
        let name = try EdgeHTTP.text(form["name"] ?? "", "name")
        AuditTrail.hub(name: name, id: "")
        let hub = try await auth.createHub(
            CreateHubRequest(name: name, maxInstallations: limit), requestID: context.requestID)
        AuditTrail.hub(name: hub.name, id: hub.id)
        return ConsolePage.redirect("/console/hubs/\(ConsolePage.pathComponent(hub.name))")
    }

    func hubPage(_ context: EdgeRequestContext, _ session: ConsoleSession, hub name: String) async throws -> Response {
        let hub = try await auth.getHub(GetHubRequest(name: name), requestID: context.requestID)
        let credentials = try await dispatch.getHubCredentials(
            GetHubCredentialsRequest(hub: hub.id), requestID: context.requestID)
        let hubPath = "/console/hubs/\(ConsolePage.pathComponent(hub.name))"
        let platforms = credentials.platforms.map { platform in
            let status: String =
                switch platform.source {
                case _ where platform.failing: "failing"
                case .hub, .deployment: "set"
                case .inbox: "inbox"
                default: "missing"
                }
            return ConsoleView.Hub.Platform(
                platform: platform.platform.name, status: status,
                source: Self.sourceText(platform.source), summary: platform.summary,
                updated: ConsolePage.time(platform.updatedAtUnixMs).nonEmpty,
                expires: ConsolePage.time(platform.expiresAtUnixMs).nonEmpty,
                expiresSoon: platform.expiresAtUnixMs > 0 && platform.expiresAtUnixMs - unixMillis() < 14 * 86_400_000,
                lastError: platform.lastError.nonEmpty,
                lastErrorAt: ConsolePage.time(platform.lastErrorAtUnixMs),
                setAction: "\(hubPath)/credentials/\(platform.platform.name)",
                fields: Self.credentialFields(platform.platform),
                deleteAction: platform.source == .hub ? "\(hubPath)/credentials/\(platform.platform.name)/delete" : nil)
        }
        let pushes = try await dispatch.getHubPushLimits(
            GetHubPushLimitsRequest(hub: hub.id), requestID: context.requestID)
        let queue = try await dispatch.getHubQueue(
            GetHubQueueRequest(hub: hub.id, scope: .hub), requestID: context.requestID)
        return ConsolePage.render(
            "hub", title: "Hub \(hub.name)", session: session,
            view: ConsoleView.Hub(
                path: hubPath, csrf: session.csrf, deletable: hub.id != Names.defaultHub,
                name: hub.name, created: ConsolePage.time(hub.createdAtUnixMs), platforms: platforms,
                keys: hub.keys.map {
                    let keyPath = "\(hubPath)/keys/\(ConsolePage.pathComponent($0.name))"
                    return ConsoleView.Hub.Key(
                        name: $0.name, rights: $0.hubRights.names.joined(separator: ", "), rotate: "\(keyPath)/rotate",
                        revoke: "\(keyPath)/revoke")
                },
                limit: Self.limitText(hub.maxInstallations), pending: String(queue.pending),
                oldestDue: Self.durationText(milliseconds: queue.oldestDueMs),
                refused: String(users.rates.refused(hub: hub.id)), limits: Self.limits(hub, pushes)),
            hub: hub.name)
    }

    /// The hub page's limits table: herald-auth's and herald-dispatch's, as `herald hubs limits` shows them.
    static func limits(_ hub: Hub, _ pushes: HubPushLimits) -> [ConsoleView.Hub.Limit] {
        typealias Limit = ConsoleView.Hub.Limit
        func value(_ limit: Int64, none: String = "none") -> String { limit > 0 ? String(limit) : none }
        return [
            Limit(name: "Installations", value: value(hub.maxInstallations), used: ""),
            Limit(
                name: "API requests a second",
                value: value(hub.requestsPerSecond)
                    + (hub.requestsPerSecond > 0 && hub.requestBurst > 0 ? " (burst \(hub.requestBurst))" : ""),
                used: ""),
            Limit(name: "Pushes a day (UTC)", value: value(pushes.pushesPerDay), used: "\(pushes.pushesToday) today"),
            Limit(
                name: "Pushes a month (UTC)", value: value(pushes.pushesPerMonth),
                used: "\(pushes.pushesThisMonth) this month"),
            Limit(
                name: "Provider requests at once, per dispatch replica",
                value: value(pushes.maxConcurrentPushes, none: "default"), used: ""),
            Limit(
                name: "Weight in delivery claims", value: pushes.weight > 1 ? String(pushes.weight) : "1 (default)",
                used: ""),
        ]
    }

    /// A wait in words: "none", "850 ms", "12 s", "3 min 20 s", "2 h 5 min".
    static func durationText(milliseconds: Int64) -> String {
        guard milliseconds > 0 else { return "none" }
        if milliseconds < 1000 { return "\(milliseconds) ms" }
        let seconds = milliseconds / 1000
        if seconds < 60 { return "\(seconds) s" }
        if seconds < 3600 { return "\(seconds / 60) min \(seconds % 60) s" }
        return "\(seconds / 3600) h \((seconds % 3600) / 60) min"
    }

    private static func limitText(_ limit: Int64) -> String {
        limit > 0 ? String(limit) : "none"
    }

    private static func sourceText(_ source: CredentialSource) -> String {
        switch source {
        case .hub: "the hub's own credentials"
        case .deployment: "herald-dispatch's settings"
        case .inbox: "recorded in the inbox, not sent"
        default: "none: deliveries fail with NoCredentials"
        }
    }

    // MARK: devices

    func devicesPage(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let query = ConsolePage.query(request)
        let filter = (
            user: query["user"] ?? "", tag: query["tag"] ?? "", platform: query["platform"] ?? "",
            handle: query["handle"] ?? ""
        )
        let page = try await registration.listDevices(
            ListDevicesRequest(
                hub: hub.id, user: try EdgeHTTP.text(filter.user, "user"), tag: try EdgeHTTP.text(filter.tag, "tag"),
                platform: try Self.platform(filter.platform), handlePrefix: try EdgeHTTP.text(filter.handle, "handle"),
                afterID: try EdgeHTTP.text(query["after"] ?? "", "after"), limit: 50, scope: .hub),
            requestID: context.requestID)
        let hubPath = "/console/hubs/\(ConsolePage.pathComponent(hub.name))"
        let devices = page.devices.map { device in
            let id = device.installationID.isEmpty ? device.registrationID : device.installationID
            let kind = device.installationID.isEmpty ? "registration" : "installation"
            return ConsoleView.Devices.Row(
                id: id, kind: kind,
                owner: device.owner, platform: device.platform.name, handle: device.handle,
                tags: device.tags.joined(separator: ", "), updated: ConsolePage.time(device.updatedAtUnixMs),
                expired: device.expired,
                send: "\(hubPath)/send"
                    + ConsolePage.query([
                        ("target", "device"), ("platform", device.platform.name), ("handle", device.handle),
                    ]),
                delete: "\(hubPath)/\(kind)s/\(ConsolePage.pathComponent(id))/delete",
                deleteOwner: device.owner.isEmpty ? nil : device.owner)
        }
        let next =
            page.nextAfterID.isEmpty
            ? ""
            : "\(hubPath)/devices"
                + ConsolePage.query([
                    ("user", filter.user), ("tag", filter.tag), ("platform", filter.platform),
                    ("handle", filter.handle),
                    ("after", page.nextAfterID),
                ])
        return ConsolePage.render(
            "devices", title: "Devices of \(hub.name)", session: session,
            view: ConsoleView.Devices(
                devices: devices, csrf: session.csrf, next: next.nonEmpty, user: filter.user, tag: filter.tag,
                handle: filter.handle,
                platforms: Self.platformOptions(selected: filter.platform, any: true), path: "\(hubPath)/devices",
                first: query["after"] != nil ? "\(hubPath)/devices" : nil),
            hub: hub.name)
    }

    // MARK: test send

    func testSend(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let (fields, files) = try await ConsolePage.upload(request, config, session: session)
        let file = files["file"]
        try Self.requireCSRF(fields, session)
        let form = TestSendForm(fields)
        let requestID = context.requestID
        do {
            let payloads = try form.payloads(content: file, previewID: 0)
            if form.action == "preview" {
                return renderSend(form, hub: hub.name, session: session, preview: payloads)
            }
            let outcome: Outcome
            switch form.kind {
            case "secure":
                try await users.requireUser(form.user, requestID: requestID)
                outcome = try await content.sendSecure(
                    form.text, to: form.user, from: session.user, hub: hub.id, requestID: requestID
                ).outcome
            case "rich":
                guard let file else { throw EdgeError(.badRequest, "choose a file to send as rich content") }
                try await users.requireUser(form.user, requestID: requestID)
                outcome = try await content.sendRich(
                    file.bytes, contentType: file.type, message: form.message,
                    richType: NativePayloads.richType(contentType: file.type),
                    to: form.user, from: session.user, hub: hub.id, requestID: requestID
                ).outcome
            default:
                outcome = try await content.send(
                    try form.request(payloads: payloads, hub: hub.id, sender: session.user), requestID: requestID)
            }
            return ConsolePage.redirect(
                "/console/hubs/\(ConsolePage.pathComponent(hub.name))/sends/\(outcome.notificationID)")
        } catch let error as EdgeError where error.status == .badRequest {
            return renderSend(
                form, hub: hub.name, session: session, preview: nil, error: error.message, status: .badRequest)
        } catch let error as ServiceError where [.invalidArgument, .notFound, .failedPrecondition].contains(error.code)
        {
            let status = EdgeError.from(error).status
            return renderSend(form, hub: hub.name, session: session, preview: nil, error: error.message, status: status)
        }
    }

    func renderSend(
        _ form: TestSendForm, hub: String, session: ConsoleSession, preview: [NativePayload]?, error: String = "",
        status: HTTPResponse.Status = .ok
    ) -> Response {
        var view = ConsoleView.Send(
            csrf: session.csrf, error: error.nonEmpty, user: form.user, tag: form.tag, handle: form.handle,
            text: form.text, message: form.message, properties: form.properties,
            action: "/console/hubs/\(ConsolePage.pathComponent(hub))/send",
            platforms: Self.platformOptions(selected: form.platform, any: false),
            targets: Self.options(
                ["user": "A user's devices", "tag": "A tag expression", "device": "One device (handle)"],
                order: ["user", "tag", "device"], selected: form.target),
            kinds: Self.options(
                [
                    "alert": "Alert (text shown as is)", "secure": "Secure (only its id is pushed)",
                    "rich": "Rich (uploaded file, its id is pushed)",
                    "template": "Template (installation templates, with properties)",
                ],
                order: ["alert", "secure", "rich", "template"], selected: form.kind))
        if let preview {
            view.previewed = true
            view.preview = preview.map { payload in
                ConsoleView.Send.Preview(
                    platform: payload.platform.name, pushType: payload.pushType.isEmpty ? "none" : payload.pushType,
                    priority: payload.priority == 0 ? "default" : String(payload.priority),
                    contentType: payload.contentType.isEmpty ? "the platform's default" : payload.contentType,
                    body: ConsolePage.pretty(payload.body))
            }
            view.template = form.kind == "template"
            view.stored = form.kind == "secure" || form.kind == "rich"
        }
        return ConsolePage.render(
            "send", title: "Test send on \(hub)", session: session, view: view, status: status, hub: hub)
    }

    // MARK: outcomes

    func sendsPage(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let query = request.uri.queryParameters
        let before = query.get("before").flatMap(Int64.init) ?? 0
        let sends = try await dispatch.listSends(
            ListSendsRequest(
                hub: hub.id, beforeCreatedAtUnixMs: max(0, before),
                beforeNotificationID: try EdgeHTTP.text(query.get("before_id") ?? "", "id"),
                limit: 25, scope: .hub),
            requestID: context.requestID)
        let stats = try await dispatch.sendStats(
            SendStatsRequest(hub: hub.id, minutes: 60, scope: .hub), requestID: context.requestID)
        let hubPath = "/console/hubs/\(ConsolePage.pathComponent(hub.name))"
        let rows = sends.sends.map { outcome in
            ConsoleView.Sends.Row(
                id: outcome.notificationID, path: "\(hubPath)/sends/\(outcome.notificationID)",
                state: OutcomeBody.state(outcome.state), created: ConsolePage.time(outcome.createdAtUnixMs),
                sender: outcome.senderName,
                counts: outcome.platforms.map {
                    "\($0.platform.name): \($0.success) ok, \($0.failure) failed"
                        + ($0.pending > 0 ? ", \($0.pending) pending" : "")
                }.joined(separator: "; "))
        }
        var next = ""
        if sends.sends.count == 25, let last = sends.sends.last {
            next =
                "\(hubPath)/sends"
                + ConsolePage.query([("before", String(last.createdAtUnixMs)), ("before_id", last.notificationID)])
        }
        let chart = ConsoleChart(minutes: stats.minutes, now: unixMillis())
        let reasons = chart.reasonTotals
        return ConsolePage.render(
            "sends", title: "Sends on \(hub.name)", session: session,
            view: ConsoleView.Sends(
                sends: rows, next: next.nonEmpty, chart: chart.svg(), reasons: reasons, hasReasons: !reasons.isEmpty,
                delivered: chart.delivered, failed: chart.failed, sendsInHour: chart.sends),
            hub: hub.name)
    }

    func outcomePage(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession, hub: ConsoleHub)
        async throws -> Response
    {
        let id = try EdgeHTTP.text(try context.parameters.require("id"), "id")
        let outcome = try await dispatch.getOutcome(
            GetOutcomeRequest(notificationID: id, hub: hub.id), requestID: context.requestID)
        let after = request.uri.queryParameters.get("after").flatMap(Int64.init) ?? 0
        let deliveries = try await dispatch.listDeliveries(
            ListDeliveriesRequest(notificationID: id, afterSequence: max(0, after), limit: 100, hub: hub.id),
            requestID: context.requestID)
        let live = [.enqueued, .processing, .scheduled].contains(outcome.state)
        let rows = deliveries.deliveries.map { delivery in
            ConsoleView.Outcome.Delivery(
                sequence: delivery.sequence, platform: delivery.platform.name,
                state: Self.deliveryState(delivery.state),
                attempts: Int64(delivery.attempts), status: delivery.lastStatus == 0 ? "" : String(delivery.lastStatus),
                reason: delivery.reason, handle: delivery.handle, messageID: delivery.messageID,
                next: delivery.state == .pending ? ConsolePage.time(delivery.nextAttemptAtUnixMs) : "")
        }
        var next = ""
        if deliveries.deliveries.count == 100, let last = deliveries.deliveries.last {
            next = "/console/hubs/\(ConsolePage.pathComponent(hub.name))/sends/\(id)?after=\(last.sequence)"
        }
        return ConsolePage.render(
            "outcome", title: "Send \(id)", session: session,
            view: ConsoleView.Outcome(
                id: id, state: OutcomeBody.state(outcome.state), live: live, sender: outcome.senderName,
                created: ConsolePage.time(outcome.createdAtUnixMs),
                started: ConsolePage.time(outcome.startedAtUnixMs).nonEmpty,
                finished: ConsolePage.time(outcome.finishedAtUnixMs).nonEmpty,
                platforms: outcome.platforms.map { platform in
                    ConsoleView.Outcome.Platform(
                        platform: platform.platform.name, success: platform.success, failure: platform.failure,
                        pending: platform.pending, removed: platform.removedHandles, retries: platform.retries,
                        failures: platform.failures.map { "\($0.reason): \($0.count)" }.joined(separator: ", "))
                },
                deliveries: rows, next: next.nonEmpty),
            hub: hub.name)
    }

    /// `/console/sends/{id}`: a send found by id alone (the inbox knows no hub), redirected to its
    /// hub's page for an operator who manages that hub; 404 otherwise, as for an unknown id.
    ///
    /// dispatch reads it within what the operator may see: any hub for the stack's admin
    /// (READ_SCOPE_ALL), else the hubs this operator manages, named in the request, so that a send
    /// of another hub is not read at all (as for a hub's keys, the scope is checked where the send
    /// is read, not after).
    func findSend(_ context: EdgeRequestContext, _ session: ConsoleSession) async throws -> Response {
        let id = try EdgeHTTP.text(try context.parameters.require("id"), "id")
        let notFound = EdgeError(.notFound, "notification \(id) not found")
        // The outcome names its hub by id; the console's paths by name. The admin manages every hub.
        let hubs = try await managedHubs(session, context)
        guard !hubs.isEmpty else { throw notFound }
        let request =
            session.admin
            ? GetOutcomeRequest(notificationID: id, scope: .all)
            : GetOutcomeRequest(notificationID: id, hubs: hubs.map(\.id))
        let outcome = try await dispatch.getOutcome(request, requestID: context.requestID)
        guard let hub = hubs.first(where: { $0.id == outcome.hub }) else { throw notFound }
        return ConsolePage.redirect("/console/hubs/\(ConsolePage.pathComponent(hub.name))/sends/\(id)")
    }

    private static func deliveryState(_ state: DeliveryState) -> String {
        switch state {
        case .pending: "Pending"
        case .delivered: "Delivered"
        case .failed: "Failed"
        case .abandoned: "Abandoned"
        default: "Unknown"
        }
    }

    // MARK: inbox

    func inboxPage(_ request: Request, _ context: EdgeRequestContext, _ session: ConsoleSession) async throws
        -> Response
    {
        try requireAdmin(session)
        let before = request.uri.queryParameters.get("before").flatMap(Int64.init) ?? 0
        let entries = try await dispatch.listInbox(
            ListInboxRequest(limit: 25, newestFirst: true, beforeSequence: max(0, before)), requestID: context.requestID
        ).entries
        let rows = entries.map { entry in
            ConsoleView.Inbox.Entry(
                sequence: entry.sequence, notificationID: entry.notificationID, platform: entry.platform.name,
                handle: entry.handle, recorded: ConsolePage.time(entry.recordedAtUnixMs),
                headers: entry.headers.map { "\($0.name): \($0.value)" }.joined(separator: "\n"),
                payload: ConsolePage.pretty(entry.payload))
        }
        let next = entries.count == 25 ? "/console/inbox?before=\(entries.last?.sequence ?? 0)" : nil
        return ConsolePage.render(
            "inbox", title: "Inbox", session: session, view: ConsoleView.Inbox(entries: rows, next: next))
    }

    // MARK: helpers

    /// A form's platform name (the tutorial's spellings); empty: any platform.
    static func platform(_ name: String) throws -> Platform {
        name.isEmpty ? .unspecified : try RegistrationBody.platform(name, field: "platform")
    }

    static func platformOptions(selected: String, any: Bool) -> [ConsoleView.Option] {
        var names = [("apns", "APNs"), ("fcm", "FCM"), ("wns", "WNS"), ("browser", "Web Push")]
        if any { names.insert(("", "any"), at: 0) }
        return names.map { ConsoleView.Option(value: $0.0, label: $0.1, selected: $0.0 == selected) }
    }

    static func options(_ labels: [String: String], order: [String], selected: String) -> [ConsoleView.Option] {
        order.map { ConsoleView.Option(value: $0, label: labels[$0] ?? $0, selected: $0 == selected) }
    }
}

/// The test send form, as posted.
struct TestSendForm {
    var target = "user"
    var kind = "alert"
    var user = ""
    var tag = ""
    var handle = ""
    var platform = "apns"
    var text = ""
    var message = ""
    var properties = ""
    var action = "send"

    init() {}

    init(_ fields: [String: String]) {
        target = fields["target"] ?? target
        kind = fields["kind"] ?? kind
        user = fields["user"]?.trimmingCharacters(in: .whitespaces) ?? ""
        tag = fields["tag"]?.trimmingCharacters(in: .whitespaces) ?? ""
        handle = fields["handle"]?.trimmingCharacters(in: .whitespaces) ?? ""
        platform = fields["platform"] ?? platform
        text = fields["text"] ?? ""
        message = fields["message"] ?? ""
        properties = fields["properties"] ?? ""
        action = fields["action"] ?? action
    }

    /// The native payloads this form sends (a stored kind's with `previewID` standing for the id
    /// the payload service assigns when it is sent). Throws 400 for what cannot be sent.
    func payloads(content: ConsolePage.UploadedFile?, previewID: Int64) throws -> [NativePayload] {
        for (value, name) in [(user, "user"), (tag, "tag"), (handle, "handle"), (text, "text"), (message, "message")] {
            _ = try EdgeHTTP.text(value, name)
        }
        switch target {
        case "user":
            guard Names.isValidUserName(user) else {
                throw EdgeError(
                    .badRequest, "the user must be a user name: 1 to 64 characters of A-Z a-z 0-9 _ @ # . -")
            }
        case "tag":
            guard kind == "alert" || kind == "template" else {
                throw EdgeError(.badRequest, "\(kind) content is readable by its recipient only: send it to a user")
            }
            _ = try TagExpression.validated(tag, field: "tag")
        case "device":
            guard kind == "alert" else {
                throw EdgeError(.badRequest, "one device takes an alert; \(kind) needs a user or a tag")
            }
            guard !handle.isEmpty else { throw EdgeError(.badRequest, "give the device's handle") }
        default:
            throw EdgeError(.badRequest, "the target must be a user, a tag expression or a device")
        }
        switch kind {
        case "alert":
            guard !text.isEmpty else { throw EdgeError(.badRequest, "the alert's text is empty") }
            let all = NativePayloads.alert(text)
            if target == "device" {
                let platform = try ConsoleRoutes.platform(platform)
                return all.filter { $0.platform == platform }
            }
            return all
        case "secure":
            guard !text.isEmpty else { throw EdgeError(.badRequest, "the secure text is empty") }
            return NativePayloads.secure(id: previewID)
        case "rich":
            return NativePayloads.rich(
                id: previewID, message: message, richType: NativePayloads.richType(contentType: content?.type ?? ""))
        case "template":
            _ = try templateProperties()
            return []
        default:
            throw EdgeError(.badRequest, "the kind must be alert, secure, rich or template")
        }
    }

    /// "name=value" lines.
    func templateProperties() throws -> [Setting] {
        try properties.split(whereSeparator: \.isNewline).compactMap { line in
            let line = line.trimmingCharacters(in: .whitespaces)
            if line.isEmpty { return nil }
            guard let equals = line.firstIndex(of: "="), equals != line.startIndex else {
                throw EdgeError(.badRequest, "each template property is one line name=value; \"\(line)\" is not")
            }
            return Setting(name: String(line[..<equals]), value: String(line[line.index(after: equals)...]))
        }
    }

    /// Dispatch's request for an alert or a template send.
    func request(payloads: [NativePayload], hub: String, sender: String) throws -> SendRequest {
        var request = SendRequest(payloads: payloads, hub: hub, principal: Principal(user: sender))
        switch target {
        case "user": request.targetUser = user
        case "tag": request.targetTag = tag
        default: request.deviceHandles = [handle]
        }
        if kind == "template" {
            request.templateSend = true
            request.templateProperties = try templateProperties()
        }
        return request
    }
}
