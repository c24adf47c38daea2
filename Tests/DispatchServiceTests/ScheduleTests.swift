import Foundation
import GRDB
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldTestSupport
import NotificationHubs
import PushProviders
import Synchronization
import Testing

@testable import DispatchService

@Suite("scheduled sends in the outbox", .watchedForStalls)
struct ScheduleTests {
    static let payload = OutboxPayload(
        platform: .apns, options: DeliveryOptions(pushType: "alert", priority: 10), body: Array("{}".utf8))
    static let target = Outbox.Target(registrationID: "r1", platform: .apns, handle: "aa")

    func schedule(_ outbox: Outbox, _ id: String, at: Int64) async throws {
        _ = try await outbox.schedule(
            id: id, sender: "s", targetUser: "u", targetTag: "", hub: "default", fireAt: at,
            request: try SendRequest(targetUser: "u").serializedBytes())
    }

    @Test("a scheduled send is made once: a second enqueue of it, or one after a cancel, writes nothing")
    func once() async throws {
        let clock = Mutex<Int64>(1_000)
        let outbox = try Outbox(db: .inMemory(), now: { clock.withLock { $0 } })
        try await schedule(outbox, "n-a", at: 5_000)
        try await schedule(outbox, "n-b", at: 6_000)
        #expect(try await outbox.dueScheduled(limit: 10).isEmpty)
        #expect(try await outbox.outcome(of: "n-a", scope: .everyHub).state == .scheduled)
        clock.withLock { $0 = 5_500 }
        #expect(try await outbox.dueScheduled(limit: 10).map(\.id) == ["n-a"])

        let made = try await outbox.enqueue(
            Outbox.Send(
                id: "n-a", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload],
                retryWindow: .seconds(60)), targets: [Self.target], scheduled: true)
        #expect(made?.state == .enqueued && made?.created == 1_000)
        let again = try await outbox.enqueue(
            Outbox.Send(
                id: "n-a", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload],
                retryWindow: .seconds(60)), targets: [Self.target], scheduled: true)
        #expect(again == nil)
        #expect(try await outbox.deliveries(of: "n-a", scope: .everyHub, after: 0, limit: 10).count == 1)
        await #expect(throws: ServiceError.self) { _ = try await outbox.cancelScheduled("n-a", scope: .everyHub) }

        let cancelled = try await outbox.cancelScheduled("n-b", scope: .everyHub)
        #expect(cancelled.state == .cancelled && cancelled.finishedAtUnixMs == 5_500)
        #expect(try await outbox.cancelScheduled("n-b", scope: .everyHub).state == .cancelled)
        clock.withLock { $0 = 7_000 }
        #expect(try await outbox.dueScheduled(limit: 10).isEmpty)
        let late = try await outbox.enqueue(
            Outbox.Send(
                id: "n-b", sender: "s", targetUser: "u", targetTag: "", payloads: [Self.payload],
                retryWindow: .seconds(60)), targets: [Self.target], scheduled: true)
        #expect(late == nil)
        #expect(try await outbox.outcome(of: "n-b", scope: .everyHub).state == .cancelled)
        await #expect(throws: ServiceError.self) { _ = try await outbox.cancelScheduled("n-b", scope: .hub("other")) }
        await #expect(throws: ServiceError.self) { _ = try await outbox.cancelScheduled("n-none", scope: .everyHub) }
    }

    @Test("a template send renders once per distinct (platform, template): 1,000 devices, 4 locales, 4 payloads")
    func templateVariants() throws {
        var audience = TemplateAudience(properties: PushTemplate.Properties([("m", "hi")]), sentAt: 1_000)
        let locales = ["en", "fr", "de", "es"]
        let registrations = (0..<1000).map { n in
            let locale = locales[n % 4]
            return Registration(
                registrationID: "t-\(n)", platform: .apns, handle: String(format: "%064x", n),
                template: InstallationTemplate(name: locale, body: #"{"aps":{"alert":"{'\#(locale): ' + $(m)}"}}"#))
        }
        try audience.add(Array(registrations[..<500]))
        try audience.add(Array(registrations[500...]))
        #expect(audience.payloads.count == 4)
        #expect(audience.targets.count == 1000)
        #expect(Set(audience.targets.map(\.variant)) == [0, 1, 2, 3])
        let fr = audience.payloads[audience.targets[1].variant]
        #expect(String(decoding: fr.body, as: UTF8.self) == #"{"aps":{"alert":"fr: hi"}}"#)
        #expect(fr.options.pushType == "alert")
        // A template's numbers come from whoever wrote the installation (the Listen key is in
        // every app): read once, bounded; a hostile one refuses the rendering, never traps.
        for (header, value) in [
            ("apns-expiration", "-9223372036854775808"), ("apns-expiration", "9223372036854775807"),
            ("apns-expiration", "$(m)"), ("apns-priority", "99999999999"),
        ] {
            let hostile = Registration(
                registrationID: "h", platform: .apns, handle: String(format: "%064x", 1),
                template: InstallationTemplate(
                    name: "h", body: #"{"aps":{"alert":"x"}}"#,
                    headers: [HubRegistrationField(name: header, value: value)]))
            var refused = TemplateAudience(
                properties: PushTemplate.Properties([("m", "-9223372036854775808")]), sentAt: Int64.max)
            try refused.add([hostile, hostile])
            // Left out of the send, with the reason kept for a send that nothing else reaches.
            #expect(
                refused.payloads.isEmpty && refused.targets.isEmpty && refused.refusedDevices == 2,
                "\(header): \(value)")
            // Named once: a refusal is not wrapped again on its way out.
            let message = refused.firstRefusal?.message ?? ""
            #expect(
                message.hasPrefix("template h (apns): ") && message.ranges(of: "template h").count == 1,
                "\(header): \(value): \(message)")
        }
        for template in [
            InstallationTemplate(
                name: "f", body: "{}", headers: [HubRegistrationField(name: "apns-expiration", value: "253402300799")]),
            InstallationTemplate(name: "f", body: "{}", expiry: "9999-12-31T23:59:59Z"),
        ] {
            var far = TemplateAudience(properties: PushTemplate.Properties([]), sentAt: 1_000)
            try far.add([
                Registration(
                    registrationID: "f", platform: .apns, handle: String(format: "%064x", 2), template: template)
            ])
            #expect(far.payloads.first?.options.expiresAtUnixMs ?? 0 != 0, "\(template)")
        }
        var tooBig = TemplateAudience(
            properties: PushTemplate.Properties([("m", String(repeating: "x", count: 5000))]), sentAt: 1_000)
        try tooBig.add([registrations[0]])
        #expect(tooBig.payloads.isEmpty && tooBig.refusedDevices == 1 && tooBig.firstRefusal != nil)
    }

    @Test("a template's platform headers follow a direct send's rules (NHHeaders): the same accepted, the same refused")
    func templateHeaders() throws {
        func render(_ platform: Platform, body: String, headers: [String: String]) throws -> OutboxPayload {
            try TemplateAudience.render(
                InstallationTemplate(
                    body: body, headers: headers.map { HubRegistrationField(name: $0.key, value: $0.value) }),
                name: "t", platform: platform, PushTemplate.Properties([]), sentAt: 1_000_000)
        }
        let apns = #"{"aps":{"alert":"x"}}"#
        // NH's older spelling of the priority, as a direct send takes it.
        #expect(try render(.apns, body: apns, headers: ["X-Apns-Priority": "5"]).options.priority == 5)
        // A priority APNs does not know is refused with the direct send's words.
        #expect {
            try render(.apns, body: apns, headers: ["apns-priority": "7"])
        } throws: { error in
            (error as? ServiceError)?.message == "template t (apns): apns-priority must be 5 or 10"
        }
        // WNS: a type outside NH's four is refused as a direct send's is; without one, the body says.
        #expect {
            try render(.wns, body: "<toast/>", headers: ["X-WNS-Type": "wns/foo"])
        } throws: { error in
            (error as? ServiceError)?.message.contains("X-WNS-Type: wns/toast, wns/tile, wns/badge or wns/raw") == true
        }
        let inferred = try render(.wns, body: "<tile><visual/></tile>", headers: ["X-WNS-TTL": "60"])
        #expect(inferred.options.pushType == "wns/tile" && inferred.options.contentType == "text/xml")
        #expect(inferred.options.expiresAtUnixMs == 1_000_000 + 60_000)
    }
}
