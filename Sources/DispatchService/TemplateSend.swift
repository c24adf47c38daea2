import Foundation
import HeraldModel
import HeraldProto
import NotificationHubs
import PushProviders

/// A template send's audience as it streams in: installation templates, each rendered once per
/// distinct (platform, template) with the send's properties, and every device given the variant
/// of its rendering. 100,000 installations with four locale templates are four renderings.
package struct TemplateAudience {
    let properties: PushTemplate.Properties
    let sentAt: Int64
    package private(set) var payloads: [OutboxPayload] = []
    package private(set) var targets: [Outbox.Target] = []
    /// Variant of each distinct template seen, by platform and the template (its name left out:
    /// two installations' equal templates render once).
    private var variants: [Platform: [InstallationTemplate: Int]] = [:]
    /// Templates that cannot be rendered for this send (a header computed out of range, a push over
    /// the platform's size): their devices are left out, not the whole send. One installation's
    /// template, written with the Listen key every app ships, must not stop a hub's broadcast.
    private var refused: [Platform: Set<InstallationTemplate>] = [:]
    /// Devices left out, and why the first template was refused.
    private(set) var refusedDevices = 0
    private(set) var firstRefusal: ServiceError?

    package init(properties: PushTemplate.Properties, sentAt: Int64) {
        self.properties = properties
        self.sentAt = sentAt
    }

    package mutating func add(_ registrations: [Registration]) throws {
        for registration in registrations {
            var key = registration.template ?? InstallationTemplate()
            let name = key.name
            key.name = ""
            let variant: Int
            if let known = variants[registration.platform]?[key] {
                variant = known
            } else if refused[registration.platform]?.contains(key) == true {
                refusedDevices += 1
                continue
            } else {
                variant = payloads.count
                var payload: OutboxPayload
                do {
                    payload = try Self.render(
                        key, name: name, platform: registration.platform, properties, sentAt: sentAt)
                } catch let error as ServiceError {
                    refused[registration.platform, default: []].insert(key)
                    refusedDevices += 1
                    firstRefusal = firstRefusal ?? error
                    continue
                }
                payload.variant = variant
                payloads.append(payload)
                variants[registration.platform, default: [:]][key] = variant
            }
            targets.append(
                Outbox.Target(
                    registrationID: registration.registrationID, platform: registration.platform,
                    handle: registration.handle,
                    variant: variant))
        }
    }

    /// The targets added since the last call, handed over (to stage or to commit): the audience
    /// keeps only its variants, so a large template send holds no more devices than a native one.
    package mutating func takeTargets() -> [Outbox.Target] {
        defer { targets = [] }
        return targets
    }

    /// One template rendered for `platform`: its body, and its headers (names case-insensitive,
    /// values expressions too) and expiry as the push's options, by the rules of a direct send's
    /// headers (``NHHeaders``). NH refuses APNs headers in templates; Herald takes them
    /// (apns-push-type, apns-priority, apns-collapse-id, apns-expiration), as NH's users ask.
    package static func render(
        _ template: InstallationTemplate, name: String, platform: Platform, _ properties: PushTemplate.Properties,
        sentAt: Int64
    ) throws -> OutboxPayload {
        /// A refusal naming the template; a type of its own, so the catch below does not wrap it twice.
        struct Refusal: Error { var error: ServiceError }
        func refuse(_ message: String) -> Refusal {
            Refusal(error: ServiceError.invalidArgument("template \(name) (\(platform.name)): \(message)"))
        }
        guard !template.body.isEmpty else { throw refuse("stored without a body").error }
        var headers: [String: String] = [:]
        do {
            for header in template.headers {
                headers[header.name.lowercased()] = try PushTemplate.renderValue(header.value, properties)
            }
            let rendered = Array(try PushTemplate(template.body).render(properties).utf8)
            var native = NativePayload(platform: platform, body: rendered)
            let header: NHHeaders.Lookup = { headers[$0] }
            switch platform {
            case .apns:
                // The template's expiry stands in for apns-expiration, as ServiceBusNotification-Apns-Expiry
                // does for a direct send.
                if try !NHHeaders.applyAPNs(header, to: &native, nowMillis: sentAt), !template.expiry.isEmpty {
                    guard
                        let ttl = NHHeaders.ttl(
                            w3cDate: try PushTemplate.renderValue(template.expiry, properties), nowMillis: sentAt)
                    else { throw refuse("expiry is not a W3C date") }
                    native.ttlSeconds = ttl
                }
            case .wns:
                // The content type follows the type: PlatformRules' default for WNS.
                try NHHeaders.applyWNS(header, to: &native, inferredType: { Self.inferredWNSType(rendered) })
            case .fcm:
                // An fcmv1 template is FCM v1's {"message":{…}}, as a native send; dispatch adds the token.
                if let wrapped = try? JSONSerialization.jsonObject(with: Data(rendered)) as? [String: Any],
                    let message = wrapped["message"] as? [String: Any]
                {
                    native.body = Array(
                        try jsonData(message, options: [.withoutEscapingSlashes]))
                }
            default:
                break
            }
            return try PlatformRules.prepare(native, sentAt: sentAt)
        } catch let refusal as Refusal {
            throw refusal.error
        } catch let error as PushTemplate.ParseError {
            throw refuse(error.message).error
        } catch let error as ServiceError {
            throw refuse(error.message).error
        }
    }

    /// WNS' type from an XML body's root element when the template names none.
    static func inferredWNSType(_ body: [UInt8]) -> String {
        let text = String(decoding: body.prefix(256), as: UTF8.self)
        guard let root = text.firstMatch(of: /<(toast|tile|badge)[\s>\/]/)?.1 else { return "wns/raw" }
        return "wns/" + root
    }
}
