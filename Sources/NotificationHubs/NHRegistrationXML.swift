import Foundation
import HeraldModel
import HeraldProto

/// NH's registration descriptions in Atom/XML, as the SDKs send and read them
/// (docs/notification-hubs.md, "Registrations"): an `<entry>` whose `<content>` holds one
/// `…RegistrationDescription` element of NH's namespace, its fields as child elements.
///
/// Reading: the elements may come in any order (the JS SDK writes `TemplateName` before `Expiry`,
/// .NET the other way); unknown elements are ignored; `i:nil="true"` is an absent value. Writing
/// follows the .NET SDK's DataContract order, which its deserializer needs, and NH's own answers in
/// structure (recorded in the .NET SDK's MockData).
///
/// Read with ``XMLSubset``, not FoundationXML's XMLParser: fuzzing found two inputs of a dozen bytes
/// each that crash the process inside FoundationXML on Linux (a processing instruction with no
/// data: strlen of NULL; an element name that is not UTF-8: a trap), and a crash reachable from
/// outside takes the edge down for everyone.
package enum NHRegistrationXML {
    package static let namespace = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
    package static let entryContentType = "application/atom+xml;type=entry;charset=utf-8"
    package static let feedContentType = "application/atom+xml;type=feed;charset=utf-8"
    /// What NH answers for a registration that never expires.
    package static let neverExpires = "9999-12-31T23:59:59.999Z"
    package static let maxElements = 512
    package static let maxDepth = 8

    /// The description kinds Herald serves: element name prefix → platform.
    package static let kinds = Dictionary(
        uniqueKeysWithValues: NHPlatformNames.all.map { ($0.description, $0.platform) })

    /// Parses an entry into a registration (id not set: the path or the edge gives it).
    package static func parse(_ body: [UInt8]) throws -> HubRegistration {
        let reader = Reader()
        do {
            try XMLSubset.parse(body, maxElements: maxElements, maxDepth: maxDepth) { event in try reader.take(event) }
        } catch let error as XMLSubset.Failure {
            throw ServiceError.invalidArgument(
                "the body is not a registration description in Atom XML: \(error.message)")
        }
        guard let kind = reader.kind else {
            throw ServiceError.invalidArgument("the entry's content holds no …RegistrationDescription element")
        }
        return try registration(kind: kind, fields: reader.fields, headers: reader.headers)
    }

    package static func registration(kind: String, fields: [String: String], headers: [HubRegistrationField]) throws
        -> HubRegistration
    {
        guard kind.hasSuffix("RegistrationDescription") else {
            throw ServiceError.invalidArgument("\(kind) is not a registration description")
        }
        var stem = String(kind.dropLast("RegistrationDescription".count))
        let isTemplate = stem.hasSuffix("Template")
        if isTemplate { stem.removeLast("Template".count) }
        guard let platform = kinds[stem] else {
            switch stem {
            case "Gcm", "Fcm":
                throw ServiceError.invalidArgument(
                    "\(kind) is FCM's legacy API, retired by Google in 2024: use FcmV1RegistrationDescription (the token stays the same)"
                )
            default:
                throw ServiceError.invalidArgument(
                    "\(kind) is not supported by Herald: use Apple, FcmV1, Windows or Browser (native or template)")
            }
        }
        var r = HubRegistration()
        r.platform = platform
        func required(_ name: String) throws -> String {
            guard let value = fields[name], !value.isEmpty else {
                throw ServiceError.invalidArgument("\(kind) needs \(name)")
            }
            return value
        }
        switch platform {
        case .apns: r.handle = try required("DeviceToken")
        case .fcm: r.handle = try required("FcmV1RegistrationId")
        case .wns: r.handle = try required("ChannelUri")
        default:
            let subscription: [String: Any] = [
                "endpoint": try required("Endpoint"),
                "keys": ["p256dh": try required("P256DH"), "auth": try required("Auth")],
            ]
            r.handle = String(decoding: try jsonData(subscription), as: UTF8.self)
        }
        r.tags = (fields["Tags"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }
        if let variables = fields["PushVariables"], !variables.isEmpty {
            guard let object = try? JSONSerialization.jsonObject(with: Data(variables.utf8)) as? [String: String]
            else {
                throw ServiceError.invalidArgument(#"PushVariables is a JSON object of strings: {"name":"value"}"#)
            }
            r.pushVariables = object.sorted { $0.key < $1.key }.map {
                HubRegistrationField(name: $0.key, value: $0.value)
            }
        }
        if isTemplate {
            r.isTemplate = true
            r.bodyTemplate = try required("BodyTemplate")
            r.templateName = fields["TemplateName"] ?? ""
            r.expiry = fields["Expiry"] ?? ""
            r.priority = fields["Priority"] ?? ""
            r.headers = headers
        }
        return r
    }

    /// One registration as NH's `<entry>`; `url` is the registration's own address.
    package static func entry(_ r: HubRegistration, url: String, root: Bool = true) -> String {
        let updated = w3c(r.updatedAtUnixMs)
        let etag = xmlEscaped("W/\"\(r.etag)\"")
        var xml = "<entry a:etag=\"\(etag)\""
        xml += root ? " xmlns=\"http://www.w3.org/2005/Atom\"" : ""
        xml += " xmlns:a=\"http://schemas.microsoft.com/ado/2007/08/dataservices/metadata\">"
        xml += "<id>\(xmlEscaped(url))</id><title type=\"text\">\(xmlEscaped(r.registrationID))</title>"
        xml += "<published>\(w3c(r.createdAtUnixMs))</published><updated>\(updated)</updated>"
        xml += "<link rel=\"self\" href=\"\(xmlEscaped(url))\"/>"
        xml += "<content type=\"application/xml\">\(description(r))</content></entry>"
        return xml
    }

    /// A page of registrations as NH's `<feed>`.
    package static func feed(_ registrations: [HubRegistration], url: String, base: String, now: Int64) -> String {
        var xml = "<feed xmlns=\"http://www.w3.org/2005/Atom\"><title type=\"text\">Registrations</title>"
        xml +=
            "<id>\(xmlEscaped(url))</id><updated>\(w3c(now))</updated><link rel=\"self\" href=\"\(xmlEscaped(url))\"/>"
        for r in registrations { xml += entry(r, url: base + r.registrationID, root: false) }
        return xml + "</feed>"
    }

    /// The `…RegistrationDescription` element, fields in the .NET SDK's DataContract order.
    package static func description(_ r: HubRegistration) -> String {
        let stem = kinds.first { $0.value == r.platform }?.key ?? "Apple"
        let name = stem + (r.isTemplate ? "Template" : "") + "RegistrationDescription"
        var xml = "<\(name) xmlns=\"\(namespace)\" xmlns:i=\"http://www.w3.org/2001/XMLSchema-instance\">"
        func element(_ tag: String, _ value: String) { xml += "<\(tag)>\(xmlEscaped(value, quotes: false))</\(tag)>" }
        element("ETag", "\(r.etag)")
        element("ExpirationTime", neverExpires)
        element("RegistrationId", r.registrationID)
        if !r.tags.isEmpty { element("Tags", r.tags.joined(separator: ",")) }
        if !r.pushVariables.isEmpty {
            let object =
                "{"
                + r.pushVariables.map { jsonStringLiteral($0.name) + ":" + jsonStringLiteral($0.value) }
                .joined(separator: ",") + "}"
            element("PushVariables", object)
        }
        switch r.platform {
        case .apns: element("DeviceToken", r.handle)
        case .fcm: element("FcmV1RegistrationId", r.handle)
        case .wns: element("ChannelUri", r.handle)
        default:
            // The handle as herald-registration stores it: {"endpoint","keys":{"p256dh","auth"}}.
            let object = (try? JSONSerialization.jsonObject(with: Data(r.handle.utf8))) as? [String: Any]
            let keys = object?["keys"] as? [String: Any]
            element("Endpoint", object?["endpoint"] as? String ?? "")
            element("P256DH", keys?["p256dh"] as? String ?? "")
            element("Auth", keys?["auth"] as? String ?? "")
        }
        if r.isTemplate {
            xml +=
                "<BodyTemplate><![CDATA[\(r.bodyTemplate.replacingOccurrences(of: "]]>", with: "]]]]><![CDATA[>"))]]></BodyTemplate>"
            func headers(_ list: String, _ item: String) {
                xml += "<\(list)>"
                for header in r.headers {
                    xml += "<\(item)><Header>\(xmlEscaped(header.name, quotes: false))</Header>"
                    xml += "<Value>\(xmlEscaped(header.value, quotes: false))</Value></\(item)>"
                }
                xml += "</\(list)>"
            }
            switch r.platform {
            case .apns:
                if r.expiry.isEmpty { xml += "<Expiry i:nil=\"true\"/>" } else { element("Expiry", r.expiry) }
                element("TemplateName", r.templateName)
                if !r.priority.isEmpty { element("Priority", r.priority) }
                headers("ApnsHeaders", "ApnsHeader")
            case .wns:
                headers("WnsHeaders", "WnsHeader")
                element("TemplateName", r.templateName)
            default:
                element("TemplateName", r.templateName)
            }
        }
        return xml + "</\(name)>"
    }

    package static func w3c(_ millis: Int64) -> String { iso8601(unixMillis: millis, fractional: false) }

    /// Collects the description's fields: the first element inside `<content>` names the kind; its
    /// children are fields (text and CDATA joined); `ApnsHeaders`/`WnsHeaders` hold header pairs.
    package final class Reader {
        var kind: String?
        var fields: [String: String] = [:]
        var headers: [HubRegistrationField] = []
        private var path: [String] = []
        private var text = ""
        private var isNil = false
        private var pending: (header: String?, value: String?) = (nil, nil)

        /// Where an element sits relative to the description: 0 the description, 1 a field, 2 a
        /// header item, 3 its Header/Value.
        private var depthBelowKind: Int? {
            guard let contentAt = path.firstIndex(of: "content") else { return nil }
            return path.count - contentAt - 2
        }

        func take(_ event: XMLSubset.Event) throws {
            switch event {
            case .start(let qualified, let attributes):
                let name = qualified.split(separator: ":").last.map(String.init) ?? qualified
                if path.isEmpty, name != "entry" {
                    throw XMLSubset.Failure(message: "the root element is <\(name)>, not <entry>")
                }
                path.append(name)
                text = ""
                if depthBelowKind == 0 {
                    guard kind == nil else {
                        throw XMLSubset.Failure(message: "the content holds more than one description")
                    }
                    kind = name
                }
                isNil = attributes.contains { $0.name.hasSuffix("nil") && $0.value == "true" }
            case .text(let value):
                text += value
            case .end:
                let name = path.last ?? ""
                switch depthBelowKind {
                case 1:
                    // A nil field is absent.
                    if !isNil, fields[name] == nil, !["ApnsHeaders", "WnsHeaders"].contains(name) {
                        fields[name] = text
                    }
                case 3:
                    if name == "Header" { pending.header = text } else if name == "Value" { pending.value = text }
                case 2:
                    if let header = pending.header {
                        headers.append(HubRegistrationField(name: header, value: pending.value ?? ""))
                    }
                    pending = (nil, nil)
                default: break
                }
                path.removeLast()
                text = ""
                isNil = false
            }
        }
    }
}
