import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import ProviderDoubles
import PushProviders
import StackTestSupport
import Testing

/// Notification Hubs' sends on `/{hub}/messages…` through the real stack to the APNs double: the
/// platform headers NH passes on, direct and batch direct sends, test sends and per-message
/// telemetry, checked at the double and in NH's XML.
@Suite("Notification Hubs sends", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct NHSendTests {

    @Test(
        "a send's principal over the RPC: a user's send is theirs to read, a key's is named and no user's, the deprecated sender still read, both at once refused"
    )
    func principals() async throws {
        try await LiveStack.with { live in
            try await RPCClient.with(socketPath: live.configuration.socketPath("dispatch"), timeout: .testRPC) {
                client in
                let dispatch = DispatchServiceClient(client)
                func send(_ principal: Principal?, sender: String = "") async throws -> Outcome {
                    try #require(
                        try await dispatch.send(
                            SendRequest(
                                targetUser: "nobody",
                                payloads: [NativePayload(platform: .apns, body: Array(#"{"aps":{"alert":"x"}}"#.utf8))],
                                sender: sender, principal: principal)
                        ).outcome)
                }
                let byUser = try await send(Principal(user: "lee"))
                #expect(byUser.principal == Principal(user: "lee") && byUser.sender == "lee")
                let read = try await dispatch.getOutcome(
                    GetOutcomeRequest(notificationID: byUser.notificationID, requester: "lee"))
                #expect(read.principal == Principal(user: "lee"))

                let key = Principal(hubKey: "DefaultFullSharedAccessSignature")
                let byKey = try await send(key)
                #expect(byKey.principal == key && byKey.sender == "$sas")
                #expect(
                    try await dispatch.getOutcome(GetOutcomeRequest(notificationID: byKey.notificationID, scope: .all))
                        .principal
                        == key)
                // An operator who manages some hubs names them: a send on another hub is not found.
                let inHubs = try await dispatch.getOutcome(
                    GetOutcomeRequest(notificationID: byKey.notificationID, hubs: ["h-other", byKey.hub]))
                #expect(inHubs.notificationID == byKey.notificationID)
                let elsewhere = await #expect(throws: ServiceError.self) {
                    try await dispatch.getOutcome(
                        GetOutcomeRequest(notificationID: byKey.notificationID, hubs: ["h-other"]))
                }
                #expect(elsewhere?.code == .notFound)
                // A read that names no requester and no hub is an operator's: it must say so.
                for scope in [ReadScope.unspecified, .hub] {
                    let unnamed = await #expect(throws: ServiceError.self) {
                        try await dispatch.getOutcome(
                            GetOutcomeRequest(notificationID: byKey.notificationID, scope: scope))
                    }
                    #expect(unnamed?.code == .permissionDenied, "\(scope)")
                    let deliveries = await #expect(throws: ServiceError.self) {
                        try await dispatch.listDeliveries(
                            ListDeliveriesRequest(notificationID: byKey.notificationID, scope: scope))
                    }
                    #expect(deliveries?.code == .permissionDenied, "\(scope)")
                    let cancel = await #expect(throws: ServiceError.self) {
                        try await dispatch.cancelScheduled(
                            CancelScheduledRequest(notificationID: byKey.notificationID, scope: scope))
                    }
                    #expect(cancel?.code == .permissionDenied, "\(scope)")
                }
                // No user reads a key's send as their own, whatever their name.
                for requester in ["lee", "sas", "$sas", "key", "DefaultFullSharedAccessSignature"] {
                    let refused = await #expect(throws: ServiceError.self) {
                        try await dispatch.getOutcome(
                            GetOutcomeRequest(notificationID: byKey.notificationID, requester: requester))
                    }
                    #expect(refused?.code == .notFound, "\(requester)")
                }

                // A caller from before `principal` (until 2027-03-01).
                let legacyUser = try await send(nil, sender: "lee")
                #expect(legacyUser.principal == Principal(user: "lee") && legacyUser.sender == "lee")
                let legacyKey = try await send(nil, sender: "$sas")
                #expect(legacyKey.principal == Principal() && legacyKey.sender == "$sas")

                let both = await #expect(throws: ServiceError.self) {
                    try await send(Principal(user: "lee", hubKey: "DefaultFullSharedAccessSignature"))
                }
                #expect(both?.code == .invalidArgument && both?.message.contains("not both") == true)
            }
        }
    }

    @Test(
        "native apple send with NH's apns-* headers: they reach APNs as given; 201 + Location; telemetry XML in the .NET order"
    )
    func nativeHeadersAndTelemetry() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            for n in 0..<3 { try await live.register("nh-user", handle: apnsToken(700 + n), tags: ["nhsend"]) }
            fixture.queue(apnsToken(702), .json(400, ["reason": "BadDeviceToken"]))
            let expiration = Int64(Date().timeIntervalSince1970) + 3600
            let send = try await NHFixture.post(
                live, "/default/messages?api-version=2015-04", full, body: #"{"aps":{"content-available":1},"k":"v"}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "nhsend"),
                    ("apns-priority", "5"),
                    ("apns-expiration", "\(expiration)"), ("apns-collapse-id", "group-1"),
                    ("apns-push-type", "background"),
                ])
            #expect(send.status == 201, "\(send.text)")
            let location = try #require(send.header("Location"))
            #expect(
                location.hasPrefix("\(live.edge.base.absoluteString)/default/messages/n-")
                    && location.hasSuffix("?api-version=2015-04"))
            let id = try NHFixture.id(location)
            let outcome = try await NHFixture.finalOutcome(live, notification: id)
            #expect(outcome.state == .completed && outcome.platforms.first?.success == 2, "\(outcome)")
            // Sent by the key that signed the request, by its name (the deprecated sender still says $sas).
            #expect(outcome.principal == Principal(hubKey: NHFixture.secret(full).name) && outcome.sender == "$sas")

            let pushes = fixture.double.requests.filter { $0.path.hasPrefix("/3/device/") }
            #expect(pushes.count == 3)
            for push in pushes {
                #expect(push.header("apns-priority") == "5")
                #expect(push.header("apns-push-type") == "background")
                #expect(push.header("apns-collapse-id") == "group-1")
                let sent = Int64(push.header("apns-expiration") ?? "") ?? 0
                #expect(abs(sent - expiration) <= 2, "apns-expiration \(sent), asked \(expiration)")
                #expect(String(decoding: push.body, as: UTF8.self) == #"{"aps":{"content-available":1},"k":"v"}"#)
            }

            let details = try await live.edge.request(
                "GET", "/default/messages/\(id)?api-version=2016-07",
                authorization: NHFixture.token(sr: NHFixture.root(live), full))
            #expect(details.status == 200, "\(details.text)")
            #expect(details.header("Content-Type")?.hasPrefix("application/xml") == true)
            let xml = details.text
            // The .NET SDK's DataContract reads members in this order; an element out of order is lost.
            let order = [
                "<NotificationId>\(id)</NotificationId>", "<Location>", "<State>Completed</State>", "<EnqueueTime>",
                "<StartTime>",
                "<EndTime>", "<TargetPlatforms>apple</TargetPlatforms>",
                "<ApnsOutcomeCounts><Outcome><Name>Success</Name><Count>2</Count></Outcome><Outcome><Name>WrongToken</Name><Count>1</Count></Outcome></ApnsOutcomeCounts>",
                "<PnsErrorDetailsUri>\(live.edge.base.absoluteString)/default/messages/\(id)/failures</PnsErrorDetailsUri>",
            ]
            let positions = order.map { xml.range(of: $0)?.lowerBound }
            #expect(!positions.contains(nil), "\(xml)")
            #expect(positions.compactMap { $0 } == positions.compactMap { $0 }.sorted(), "\(xml)")
            #expect(
                xml.hasPrefix(
                    #"<NotificationDetails xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect""#
                ))
            // PnsErrorDetailsUri: the per-device failures, NDJSON.
            let failures = try await live.edge.request(
                "GET", "/default/messages/\(id)/failures",
                authorization: NHFixture.token(sr: NHFixture.root(live), full))
            #expect(failures.status == 200, "\(failures.text)")
            #expect(
                failures.text.contains(#""handle":"\#(apnsToken(702))""#)
                    && failures.text.contains(#""reason":"BadDeviceToken""#))
            #expect(failures.text.split(separator: "\n").count == 1, "\(failures.text)")

            // Another hub's key does not see this hub's send.
            let other = try await NHFixture.hub("otherhub", live).full
            let hidden = try await live.edge.request(
                "GET", "/otherhub/messages/\(id)",
                authorization: NHFixture.token(sr: NHFixture.root(live), other))
            #expect(hidden.status == 404, "\(hidden.text)")
        }
    }

    @Test(
        "direct and batch direct sends reach unregistered handles; bad handles, retired formats and oversize bodies are refused"
    )
    func directAndBatch() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            let direct = try await NHFixture.post(
                live, "/default/messages?direct&api-version=2015-04", full, body: #"{"aps":{"alert":"direct"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-DeviceHandle", apnsToken(801)),
                ])
            #expect(direct.status == 201, "\(direct.text)")
            let outcome = try await NHFixture.finalOutcome(
                live, notification: try NHFixture.id(direct.header("Location")))
            #expect(outcome.state == .completed && outcome.platforms.first?.success == 1, "\(outcome)")
            #expect(fixture.double.requests.contains { $0.path == "/3/device/\(apnsToken(801))" })

            let bad = try await NHFixture.post(
                live, "/default/messages?direct", full, body: #"{"aps":{"alert":"x"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-DeviceHandle", "not-hex"),
                ])
            #expect(bad.status == 400 && bad.text.contains("device handle 1"), "\(bad.text)")

            // Batch: the JS SDK's boundary spelling, a lower-case Content-type in the part, the docs' single quotes.
            let handles = (0..<3).map { apnsToken(810 + $0) }
            let boundary = "nh-boundary-1234"
            let multipart = [
                "--\(boundary)", "Content-type: application/json;charset=utf-8",
                "Content-Disposition: inline; name=notification", "",
                #"{"aps":{"alert":"batch"}}"#, "--\(boundary)", "Content-Type: application/json",
                "Content-Disposition: inline; name=devices",
                "", "[" + handles.map { "'\($0)'" }.joined(separator: ",") + "]", "--\(boundary)--", "",
            ].joined(separator: "\r\n")
            let batch = try await NHFixture.post(
                live, "/default/messages/$batch?direct&api-version=2015-08", full, body: multipart,
                contentType: #"multipart/mixed; boundary = "\#(boundary)""#,
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(batch.status == 201, "\(batch.text)")
            // Not NH's recorded `messages/$batch/{id}`: the JS SDK takes path segment 3 as the id,
            // and .NET and Java take the last one; `messages/{id}` serves all three.
            let batchLocation = try #require(batch.header("Location"))
            #expect(
                URL(string: batchLocation)?.pathComponents.dropFirst().map { $0 }.prefix(2) == ["default", "messages"],
                "\(batchLocation)")
            #expect(
                URL(string: batchLocation)?.pathComponents.count == 4 && batchLocation.contains("/messages/n-"),
                "\(batchLocation)")
            let batchOutcome = try await NHFixture.finalOutcome(
                live, notification: try NHFixture.id(batch.header("Location")))
            #expect(batchOutcome.platforms.first?.success == 3, "\(batchOutcome)")
            for handle in handles {
                let push = fixture.double.requests.first { $0.path == "/3/device/\(handle)" }
                #expect(push.map { String(decoding: $0.body, as: UTF8.self) } == #"{"aps":{"alert":"batch"}}"#)
            }
            let noDevices = try await NHFixture.post(
                live, "/default/messages/$batch?direct", full,
                body: "--b\r\nContent-Disposition: inline; name=notification\r\n\r\n{}\r\n--b--\r\n",
                contentType: "multipart/mixed; boundary=b", headers: [("ServiceBusNotification-Format", "apple")])
            #expect(noDevices.status == 400 && noDevices.text.contains("Could not find a part"), "\(noDevices.text)")

            for (format, expected) in [("windowsphone", "retired"), ("gcm", "fcmv1"), ("baidu", "not supported")] {
                let refused = try await NHFixture.post(
                    live, "/default/messages", full, body: "{}", headers: [("ServiceBusNotification-Format", format)])
                #expect(refused.status == 400 && refused.text.contains(expected), "\(format): \(refused.text)")
            }
            let windows = try await NHFixture.post(
                live, "/default/messages", full, body: "<toast/>", contentType: "application/xml",
                headers: [("ServiceBusNotification-Format", "windows")])
            #expect(windows.status == 400 && windows.text.contains("X-WNS-Type"), "\(windows.text)")
            let large = try await NHFixture.post(
                live, "/default/messages", full, body: String(repeating: "x", count: 65 * 1024),
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(large.status == 413 && large.text.contains("64 Kb"), "\(large.status) \(large.text)")
        }
    }

    @Test("test send: at most 10 devices, answered with NH's NotificationOutcome and each device's result")
    func testSend() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            for n in 0..<12 { try await live.register("tester", handle: apnsToken(900 + n), tags: ["qa"]) }
            fixture.queue(apnsToken(900), .json(400, ["reason": "BadDeviceToken"]))
            let send = try await NHFixture.post(
                live, "/default/messages?test&api-version=2015-04", full, body: #"{"aps":{"alert":"test"}}"#,
                headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "qa")])
            #expect(send.status == 201, "\(send.text)")
            let xml = send.text
            #expect(xml.hasPrefix("<NotificationOutcome "), "\(xml)")
            let results = xml.components(separatedBy: "<RegistrationResult>").count - 1
            #expect(results == 10, "\(xml)")
            let success = xml.firstMatch(of: /<Success>(\d+)<\/Success><Failure>(\d+)<\/Failure>/)
            #expect(success.map { Int($0.1)! + Int($0.2)! } == 10, "\(xml)")
            #expect(xml.contains("<ApplicationPlatform>apple</ApplicationPlatform>"))
            #expect(xml.contains("The Notification was successfully sent to the Push Notification System"))
            #expect(fixture.double.requests.filter { $0.path.hasPrefix("/3/device/") }.count == 10)

            let none = try await NHFixture.post(
                live, "/default/messages?test", full, body: #"{"aps":{"alert":"test"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "nobody-has-this"),
                ])
            #expect(
                none.status == 201
                    && none.text.contains(#"<Success>0</Success><Failure>0</Failure><Results i:nil="true"/>"#),
                "\(none.text)")
        }
    }

    @Test(
        "a test send answers after nh-test-send-wait-ms with what it has: a push still on its way is \"still being delivered\""
    )
    func testSendWait() async throws {
        // Later flags win: this stack's edge waits 300 ms, and the APNs double answers after 5 s.
        try await StackFixture.withProviders(edge: ["--nh-test-send-wait-ms", "300"]) { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            let slow = apnsToken(990)
            try await live.register("slow", handle: slow, tags: ["slow"])
            var late = PushDouble.Reply(status: 200)
            late.delay = .seconds(5)
            fixture.queue(slow, late)
            let send = try await NHFixture.post(
                live, "/default/messages?test", full, body: #"{"aps":{"alert":"test"}}"#,
                headers: [("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "slow")])
            #expect(send.status == 201, "\(send.text)")
            #expect(send.text.contains("<Success>0</Success><Failure>0</Failure>"), "\(send.text)")
            #expect(send.text.contains("<PnsHandle>\(slow)</PnsHandle>"), "\(send.text)")
            #expect(send.text.contains("The notification is still being delivered"), "\(send.text)")
            // The push itself is not given up: it arrives.
            _ = try await fixture.double.waitFor(1, timeout: .seconds(30)) { $0.path == "/3/device/\(slow)" }
        }
    }

    @Test(
        "scheduled sends: every ScheduleTime spelling, Location, telemetry Scheduled, cancel is 200 and final, 7 days at most"
    )
    func scheduled() async throws {
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            let auth = { NHFixture.token(sr: NHFixture.root(live), full) }
            let (kept, dropped) = (apnsToken(960), apnsToken(961))
            try await live.register("s1", handle: kept, tags: ["keep"])
            try await live.register("s2", handle: dropped, tags: ["drop"])
            func iso(_ date: Date, _ format: String) -> String {
                let formatter = DateFormatter()
                formatter.locale = Locale(identifier: "en_US_POSIX")
                formatter.timeZone = TimeZone(secondsFromGMT: 0)
                formatter.dateFormat = format
                return formatter.string(from: date)
            }
            // The one to cancel is due first, so once the kept one has arrived the cancelled one's time has passed.
            // Eight seconds ahead: the GET and the cancel below must come before it is due, and a
            // loaded CI machine (fresh-clone run W, PostgreSQL pass) took more than two.
            let soon = Date().addingTimeInterval(8)
            let drop = try await NHFixture.post(
                live, "/default/schedulednotifications/?api-version=2020-06", full,
                body: #"{"aps":{"alert":"dropped"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "drop"),
                    ("ServiceBusNotification-ScheduleTime", iso(soon, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")),  // JS
                ])
            #expect(drop.status == 201, "\(drop.text)")
            let dropLocation = try #require(drop.header("Location"))
            #expect(
                dropLocation.contains("/default/schedulednotifications/n-")
                    && dropLocation.hasSuffix("?api-version=2020-06"))
            let dropID = try NHFixture.id(dropLocation)
            let details = try await live.edge.request("GET", "/default/messages/\(dropID)", authorization: auth())
            #expect(details.text.contains("<State>Scheduled</State>"), "\(details.text)")
            let cancel = try await live.edge.request(
                "DELETE", "/default/schedulednotifications/\(dropID)", authorization: auth())
            #expect(cancel.status == 200, "\(cancel.text)")
            #expect(
                try await live.edge.request(
                    "DELETE", "/default/schedulednotifications/\(dropID)", authorization: auth()
                ).status == 200)
            #expect(
                try await live.edge.request("DELETE", "/default/schedulednotifications/n-0", authorization: auth())
                    .status == 404)

            // .NET's "s" format (UTC, no zone), rounded up to the next second.
            let later = Date(timeIntervalSince1970: (soon.timeIntervalSince1970 + 1).rounded(.up))
            let keep = try await NHFixture.post(
                live, "/default/schedulednotifications?api-version=2020-06", full, body: #"{"aps":{"alert":"kept"}}"#,
                headers: [
                    ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-Tags", "keep"),
                    ("ServiceBusNotification-ScheduleTime", iso(later, "yyyy-MM-dd'T'HH:mm:ss")),
                ])
            #expect(keep.status == 201, "\(keep.text)")
            let keepID = try NHFixture.id(keep.header("Location"))
            let outcome = try await NHFixture.finalOutcome(live, notification: keepID)
            #expect(outcome.state == .completed && outcome.platforms.first?.success == 1, "\(outcome)")
            let arrived = try #require(fixture.double.requests.first { $0.path == "/3/device/\(kept)" })
            #expect(
                arrived.wallClock >= later.addingTimeInterval(-0.01),
                "sent at \(arrived.wallClock), scheduled for \(later)")
            #expect(
                !fixture.double.requests.contains { $0.path == "/3/device/\(dropped)" }, "the cancelled send was sent")
            let cancelled = try await live.edge.request("GET", "/default/messages/\(dropID)", authorization: auth())
            #expect(
                cancelled.text.contains("<State>Cancelled</State>") && cancelled.text.contains("<EndTime>"),
                "\(cancelled.text)")
            let sent = try await live.edge.request(
                "DELETE", "/default/schedulednotifications/\(keepID)", authorization: auth())
            #expect(sent.status == 409, "\(sent.text)")

            for (time, expected) in [
                (iso(Date().addingTimeInterval(8 * 86400), "yyyy-MM-dd'T'HH:mm:ss"), "7 days"),
                ("next tuesday", "ISO 8601"),
            ] {
                let refused = try await NHFixture.post(
                    live, "/default/schedulednotifications", full, body: #"{"aps":{"alert":"x"}}"#,
                    headers: [
                        ("ServiceBusNotification-Format", "apple"), ("ServiceBusNotification-ScheduleTime", time),
                    ])
                #expect(refused.status == 400 && refused.text.contains(expected), "\(time): \(refused.text)")
            }
            let missing = try await NHFixture.post(
                live, "/default/schedulednotifications", full, body: #"{"aps":{"alert":"x"}}"#,
                headers: [("ServiceBusNotification-Format", "apple")])
            #expect(missing.status == 400 && missing.text.contains("ScheduleTime"), "\(missing.text)")
        }
    }

    @Test(
        "template sends: each installation template matched on its own tags, rendered once per distinct template, per platform"
    )
    func templates() async throws {
        // With audience-memory-rows 2, the audience is staged in the outbox as it streams in (as a
        // large one is): each staged device keeps its own rendering.
        try await StackFixture.withProviders(extra: ["--audience-memory-rows", "2"]) { fixture, live in
            let full = try await NHFixture.defaultHub(live)
            let auth = NHFixture.token(sr: NHFixture.root(live), full)
            let en = ##"{\"aps\":{\"alert\":\"{'Breaking: ' + $(headline)}\",\"badge\":\"#(count)\"}}"##
            let fr = #"{\"aps\":{\"alert\":\"{'Dernière : ' + $(headline_fr:{sans titre})}\"}}"#
            let toast =
                #"<toast><visual><binding template=\"ToastText01\"><text id=\"1\">$(headline)</text></binding></visual></toast>"#
            let devices: [(id: String, platform: String, channel: String, templates: String)] = [
                (
                    "en-1", "apns", apnsToken(1001),
                    #""en":{"body":"\#(en)","tags":["lang_en"],"headers":{"apns-priority":"5"}}"#
                ),
                (
                    "en-2", "apns", apnsToken(1002),
                    #""en":{"body":"\#(en)","tags":["lang_en"],"headers":{"apns-priority":"5"}}"#
                ),
                ("fr-1", "apns", apnsToken(1003), #""fr":{"body":"\#(fr)","tags":["lang_fr"]}"#),
                (
                    "win-1", "wns", "\(fixture.double.url)/wns/win-1?token=T",
                    #""en":{"body":"\#(toast)","tags":["lang_en"],"headers":{"X-WNS-Type":"wns/toast"}}"#
                ),
                ("plain", "apns", apnsToken(1004), ""),
            ]
            for device in devices {
                let put = try await live.edge.request(
                    "PUT", "/default/installations/\(device.id)", authorization: auth,
                    body:
                        #"{"installationId":"\#(device.id)","platform":"\#(device.platform)","pushChannel":"\#(device.channel)","tags":["news"],"templates":{\#(device.templates)}}"#
                )
                #expect(put.status == 200, "\(device.id): \(put.text)")
            }
            // A template that NH's validator refuses is refused when the installation is written.
            let bad = try await live.edge.request(
                "PUT", "/default/installations/bad", authorization: auth,
                body:
                    #"{"installationId":"bad","platform":"apns","pushChannel":"\#(apnsToken(1005))","templates":{"x":{"body":"{\"a\":\"$(p\"}"}}}"#
            )
            #expect(bad.status == 400 && bad.text.contains("template x body"), "\(bad.text)")

            let send = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"headline":"Storm <warning>","count":"3"}"#,
                headers: [
                    ("ServiceBusNotification-Format", "template"),
                    ("ServiceBusNotification-Tags", "lang_en || lang_fr"),
                ])
            #expect(send.status == 201, "\(send.text)")
            let outcome = try await NHFixture.finalOutcome(
                live, notification: try NHFixture.id(send.header("Location")))
            #expect(outcome.state == .completed, "\(outcome)")
            #expect(outcome.platforms.map(\.success).reduce(0, +) == 4, "\(outcome)")
            func body(_ path: String) -> String? {
                fixture.double.requests.first { $0.path == path }.map { String(decoding: $0.body, as: UTF8.self) }
            }
            #expect(body("/3/device/\(apnsToken(1001))") == #"{"aps":{"alert":"Breaking: Storm <warning>","badge":3}}"#)
            #expect(body("/3/device/\(apnsToken(1002))") == #"{"aps":{"alert":"Breaking: Storm <warning>","badge":3}}"#)
            #expect(body("/3/device/\(apnsToken(1003))") == #"{"aps":{"alert":"Dernière : sans titre"}}"#)
            #expect(
                body("/wns/win-1?token=T")
                    == #"<toast><visual><binding template="ToastText01"><text id="1">Storm &lt;warning&gt;</text></binding></visual></toast>"#
            )
            #expect(
                body("/3/device/\(apnsToken(1004))") == nil, "an installation without templates got a template send")
            #expect(
                fixture.double.requests.first { $0.path == "/3/device/\(apnsToken(1001))" }?.header("apns-priority")
                    == "5")
            #expect(try await StackFixture.deliveries(live, outcome.notificationID).count == 4)

            // The template's name is one of its tags: a send to "fr" reaches the fr template only.
            let before = fixture.double.requests.count
            let fr2 = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"headline_fr":"Orage"}"#,
                headers: [("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-Tags", "fr")])
            _ = try await NHFixture.finalOutcome(live, notification: try NHFixture.id(fr2.header("Location")))
            let after = fixture.double.requests.dropFirst(before).filter {
                !StackFixture.tokenPaths.contains($0.path)
            }
            #expect(after.map(\.path) == ["/3/device/\(apnsToken(1003))"], "\(after.map(\.path))")
            #expect(
                after.first.map { String(decoding: $0.body, as: UTF8.self) } == #"{"aps":{"alert":"Dernière : Orage"}}"#
            )

            for (properties, expected) in [
                ("[1,2]", "JSON object of properties"), (#"{"a":{"b":1}}"#, "must be a string"),
            ] {
                let refused = try await NHFixture.post(
                    live, "/default/messages", full, body: properties,
                    headers: [("ServiceBusNotification-Format", "template")])
                #expect(refused.status == 400 && refused.text.contains(expected), "\(refused.text)")
            }
            // Properties that make every rendering too large for APNs: 400 naming the template (when
            // some render, the others' devices are left out instead: NHHostileTests).
            let huge = try await NHFixture.post(
                live, "/default/messages", full, body: #"{"headline_fr":"\#(String(repeating: "x", count: 5000))"}"#,
                headers: [("ServiceBusNotification-Format", "template"), ("ServiceBusNotification-Tags", "lang_fr")])
            #expect(huge.status == 400 && huge.text.contains("template fr"), "\(huge.status) \(huge.text)")
        }
    }

    @Test(
        "azure-notification-hub-unofficial sends native, template and scheduled notifications and reads telemetry, unchanged"
    )
    func unofficialPythonClientSends() async throws {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        try await StackFixture.withProviders { fixture, live in
            let full = try await NHFixture.defaultHub(live).replacingOccurrences(
                of: "Endpoint=sb://", with: "Endpoint=http://")
            let apns = apnsToken(1100)
            let browser = BrowserSubscription(endpoint: "\(fixture.double.url)/push/py-1")
            let result = try await runProgram(
                python,
                [
                    packageRoot.appendingPathComponent("Tests/python/nh_sends_check.py").path, "default", full, apns,
                    "fcm-py-1",
                    "\(fixture.double.url)/wns/py-1?token=W", browser.handle,
                ])
            try #require(result.status == 0, "nh_sends_check.py failed: \(result.error)")
            let out = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
            for id in ["windows_id", "browser_id", "apple_id", "fcm_id", "template_id", "scheduled_id"] {
                let outcome = try await NHFixture.finalOutcome(
                    live, notification: try #require(out[id] as? String))
                #expect(
                    outcome.state == .completed && outcome.platforms.map(\.success).reduce(0, +) >= 1,
                    "\(id): \(outcome)")
            }
            let toAPNs = fixture.double.requests.filter { $0.path == "/3/device/\(apns)" }
            let bodies = toAPNs.map { String(decoding: $0.body, as: UTF8.self) }
            // Native bodies arrive byte for byte as the client wrote them (json.dumps' spaces included).
            #expect(bodies.contains(#"{"aps": {"alert": "native apple"}}"#), "\(bodies)")
            #expect(
                toAPNs.first { String(decoding: $0.body, as: UTF8.self).contains("native apple") }?.header(
                    "apns-priority") == "10")
            #expect(bodies.contains(#"{"aps":{"alert":"News: from python","badge":2}}"#), "\(bodies)")
            #expect(bodies.contains(#"{"aps": {"alert": "scheduled"}}"#), "\(bodies)")
            #expect(!bodies.contains { $0.contains("cancelled") }, "the cancelled send was sent")
            // The FCM sends (native and template) go in their own batches: under load they can come
            // after the scheduled APNs push waited for above, so they are waited for too.
            _ = try await fixture.double.waitFor(2, timeout: .seconds(20)) {
                $0.path.hasSuffix("/messages:send") && String(decoding: $0.body, as: UTF8.self).contains("fcm-py-1")
            }
            let toFCM = fixture.double.requests.filter { $0.path.hasSuffix("/messages:send") }.map {
                String(decoding: $0.body, as: UTF8.self)
            }
            #expect(toFCM.contains(#"{"message":{"token":"fcm-py-1","data":{"k":"native fcm"}}}"#), "\(toFCM)")
            #expect(
                toFCM.contains(#"{"message":{"token":"fcm-py-1","notification":{"title":"from python"}}}"#), "\(toFCM)")
            let wns = fixture.double.requests.first { $0.path == "/wns/py-1?token=W" }
            #expect(
                wns.map { String(decoding: $0.body, as: UTF8.self) }
                    == #"<toast><visual><binding template="ToastText01"><text id="1">native wns</text></binding></visual></toast>"#
            )
            #expect(wns?.header("x-wns-type") == "wns/toast")
            // Web Push is encrypted for the subscription (the double checks VAPID and aes128gcm); the
            // record holds the 16-byte salt, record size, key id and the 16-byte tag around the text.
            let web = try #require(fixture.double.requests.first { $0.path == "/push/py-1" })
            #expect(web.header("content-encoding") == "aes128gcm")
            let plaintext: Int = #"{"title": "native web push"}"#.utf8.count
            let expectedLength: Int = 86 + plaintext + 1 + 16
            #expect(web.body.count == expectedLength, "\(web.body.count)")
            let scheduled = try #require(out["scheduled_details"] as? String)
            #expect(
                scheduled.contains("<State>Completed</State>") && scheduled.contains("<ApnsOutcomeCounts>"),
                "\(scheduled)")
            #expect((out["apple_details"] as? String)?.contains("<TargetPlatforms>apple</TargetPlatforms>") == true)
            #expect((out["cancelled_details"] as? String)?.contains("<State>Cancelled</State>") == true, "\(out)")
        }
    }

    @Test(
        "notificationhubs-rest-python (Microsoft's sample) over HTTPS: native, direct, template, scheduled and test sends, unchanged"
    )
    func restPythonSample() async throws {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        // The sample builds https:// URLs from the connection string whatever it says.
        try await StackFixture.withProviders(httpsEdge: true) { fixture, live in
            #expect(live.edge.base.scheme == "https")
            let full = try await NHFixture.defaultHub(live)
            let (tagged, direct) = (apnsToken(1200), apnsToken(1201))
            let result = try await runProgram(
                python,
                [
                    packageRoot.appendingPathComponent("Tests/python/nh_rest_sample_check.py").path, "default",
                    full,
                    tagged, direct,
                    "fcm-rest-1",
                ],
                environment: ["REQUESTS_CA_BUNDLE": fixture.tls.ca])
            try #require(result.status == 0, "nh_rest_sample_check.py failed: \(result.error)")
            let out = try #require(
                try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
            for send in ["apple", "direct", "template", "scheduled", "fcmv1"] {
                #expect(out[send] as? Int == 201, "\(send): \(out)")
            }
            // The sample's quoted 'T' (a known bug of it), taken as sent.
            #expect((out["scheduled_header"] as? String)?.contains("'T'") == true)
            #expect((out["gcm"] as? String)?.contains("400") == true, "\(out)")
            let test = try #require(out["test_send"] as? String)
            #expect(test.contains("<NotificationOutcome") && test.contains("<Success>1</Success>"), "\(test)")

            // What arrived: byte for byte as the sample wrote it (json.dumps' spaces), the template rendered.
            _ = try await fixture.double.waitFor(1, timeout: .seconds(20)) {
                String(decoding: $0.body, as: UTF8.self).contains("rest scheduled")
            }
            let apns = fixture.double.requests.filter { $0.path.hasPrefix("/3/device/") }
            func bodies(_ token: String) -> [String] {
                apns.filter { $0.path == "/3/device/\(token)" }.map { String(decoding: $0.body, as: UTF8.self) }
            }
            #expect(
                Set(bodies(tagged)).isSuperset(of: [
                    #"{"aps": {"alert": "rest apple"}}"#, #"{"aps":{"alert":"rest template"}}"#,
                    #"{"aps": {"alert": "rest scheduled"}}"#,
                    #"{"aps": {"alert": "rest test"}}"#,
                ]), "\(bodies(tagged))")
            #expect(bodies(direct) == [#"{"aps": {"alert": "rest direct"}}"#])
            // The FCM send is delivered on its own batch: under load it can come after the
            // scheduled APNs push waited for above, so it is waited for too.
            _ = try await fixture.double.waitFor(1, timeout: .seconds(20)) {
                $0.path.hasSuffix("/messages:send") && String(decoding: $0.body, as: UTF8.self).contains("rest fcm")
            }
            let toFCM = fixture.double.requests.filter { $0.path.hasSuffix("/messages:send") }.map {
                String(decoding: $0.body, as: UTF8.self)
            }
            #expect(toFCM.contains(#"{"message":{"token":"fcm-rest-1","data":{"k":"rest fcm"}}}"#), "\(toFCM)")
            // withProviders checks the doubles found no rule violations.
        }
    }
}

/// NH's Registrations API through the whole stack: registrations written as the .NET SDK writes
/// them are devices like installations (native and template sends, dead-handle feedback), and a
/// client no one here wrote reads and deletes them.
@Suite("NH registrations through the stack", .watchedForStalls)
struct NHRegistrationStackTests {
    static func apple(_ token: String, tags: String, template: String? = nil) -> String {
        let kind = template == nil ? "AppleRegistrationDescription" : "AppleTemplateRegistrationDescription"
        var xml =
            #"<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><\#(kind) xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><RegistrationId i:nil="true"/><Tags>\#(tags)</Tags><DeviceToken>\#(token)</DeviceToken>"#
        if let template { xml += "<BodyTemplate><![CDATA[\(template)]]></BodyTemplate><Expiry i:nil=\"true\"/>" }
        return xml + "</\(kind)></content></entry>"
    }

    @Test(
        "native and template registrations beside an installation: each send reaches its own kind; APNs' 410 deletes the registration; the Python NH client reads and deletes"
    )
    func registrationsAreDevices() async throws {
        let python = try #require(which("python3"), "python3 is required (scripts/test.sh installs it)")
        try await StackFixture.withProviders { fixture, live in
            let keys = try await NHFixture.hub("reghub", live)
            let herald = live.configuration.binDirectory + "/herald"
            let set = try await runProgram(
                herald,
                [
                    "hubs", "credentials", "set", "reghub", "apns", "key=@\(fixture.folder)/apns.p8",
                    "key-id=\(ProviderFixture.keyID)", "team-id=\(ProviderFixture.teamID)",
                    "topic=\(ProviderFixture.topic)", "url=\(fixture.double.url)", "--runtime-dir",
                    live.configuration.runtimeDirectory,
                ])
            try #require(set.status == 0, "\(set.error)")
            let listen = NHFixture.token(sr: NHFixture.root(live), keys.listen)
            let (native, template, installed) = (apnsToken(2001), apnsToken(2002), apnsToken(2003))
            let created = try await live.edge.request("POST", "/reghub/registrationids", authorization: listen)
            #expect(created.status == 201)
            let id = try NHFixture.id(created.header("Location"))
            for (path, body) in [
                ("/reghub/registrations/\(id)", Self.apple(native, tags: "reg")),
                (
                    "/reghub/registrations/tmpl-1",
                    Self.apple(template, tags: "reg", template: #"{"aps":{"alert":"$(m)"}}"#)
                ),
            ] {
                let put = try await live.edge.request(
                    "PUT", path, authorization: listen, bytes: Data(body.utf8),
                    contentType: "application/atom+xml;type=entry;charset=utf-8")
                #expect(put.status == 200, "\(path): \(put.text)")
            }
            let put = try await live.edge.request(
                "PUT", "/reghub/installations/inst", authorization: listen,
                body: #"{"installationId":"inst","platform":"apns","pushChannel":"\#(installed)","tags":["reg"]}"#)
            #expect(put.status == 200)

            func send(_ format: String, _ body: String) async throws -> Outcome {
                let reply = try await NHFixture.post(
                    live, "/reghub/messages", keys.full, body: body,
                    headers: [("ServiceBusNotification-Format", format), ("ServiceBusNotification-Tags", "reg")])
                #expect(reply.status == 201, "\(reply.text)")
                return try await NHFixture.finalOutcome(
                    live, notification: try NHFixture.id(reply.header("Location")))
            }
            func paths(after count: Int) -> Set<String> {
                Set(
                    fixture.double.requests.dropFirst(count).map(\.path).filter {
                        !StackFixture.tokenPaths.contains($0)
                    })
            }
            var before = fixture.double.requests.count
            _ = try await send("apple", #"{"aps":{"alert":"native"}}"#)
            #expect(paths(after: before) == ["/3/device/\(native)", "/3/device/\(installed)"])
            before = fixture.double.requests.count
            _ = try await send("template", #"{"m":"templated"}"#)
            #expect(paths(after: before) == ["/3/device/\(template)"])
            #expect(
                fixture.double.requests.last { $0.path == "/3/device/\(template)" }.map {
                    String(decoding: $0.body, as: UTF8.self)
                } == #"{"aps":{"alert":"templated"}}"#)

            // APNs: the native registration's token is dead. Dispatch reports it from a durable
            // queue: poll until the registration is gone.
            fixture.queue(
                native,
                .json(410, ["reason": "Unregistered", "timestamp": Int64(Date().timeIntervalSince1970 * 1000) + 1000]))
            _ = try await send("apple", #"{"aps":{"alert":"again"}}"#)
            var status = 200
            let deadline = ContinuousClock.now + .seconds(15)
            while status == 200, ContinuousClock.now < deadline {
                status = try await live.edge.request("GET", "/reghub/registrations/\(id)", authorization: listen).status
                if status == 200 { try await Task.sleep(for: .milliseconds(50)) }
            }
            #expect(status == 404, "the dead registration was not removed")

            let http = { (s: String) in s.replacingOccurrences(of: "Endpoint=sb://", with: "Endpoint=http://") }
            let result = try await runProgram(
                python,
                [
                    packageRoot.appendingPathComponent("Tests/python/nh_registrations_check.py").path, "reghub",
                    http(keys.full), http(keys.listen), "tmpl-1", "inst",
                ])
            try #require(result.status == 0, "nh_registrations_check.py failed: \(result.error)")
            let out = try #require(try JSONSerialization.jsonObject(with: Data(result.output.utf8)) as? [String: Any])
            // The installation is listed among registrations, as NH lists it.
            #expect(out["listed"] as? [String] == ["inst", "tmpl-1"], "\(out)")
            #expect(out["listen_list"] as? Int == 401)
            let registration = try #require(out["tmpl-1"] as? [String: Any])
            let got = try #require(registration["get"] as? [String: Any])
            #expect(got["DeviceToken"] as? String == template)
            #expect(got["Tags"] as? [String] == ["reg"])
            #expect(got["etag"] as? String == "W/\"1\"")
            let installation = try #require(out["inst"] as? [String: Any])
            let inst = try #require(installation["get"] as? [String: Any])
            #expect(inst["DeviceToken"] as? String == installed)
            #expect(inst["Tags"] as? [String] == ["reg", "$InstallationId:{inst}"])
            for entry in [registration, installation] {
                #expect(entry["delete"] as? Int == 200)
                #expect(entry["get_deleted"] as? Int == 404)
            }
            #expect(
                try await live.edge.request("GET", "/reghub/installations/inst", authorization: listen).status == 404)
        }
    }
}
