import Foundation
import HeraldModel
import HeraldProto
import HeraldTestSupport
import NotificationHubs
import Testing

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// A `…RegistrationDescription` element of NH's namespace around `fields`.
private func nhDescription(_ kind: String, _ fields: String) -> String {
    #"<\#(kind) xmlns:i="http://www.w3.org/2001/XMLSchema-instance" xmlns="\#(NHRegistrationXML.namespace)">\#(fields)</\#(kind)>"#
}

/// A Web Push subscription's JSON, compared whatever its keys' order.
private struct Subscription: Decodable, Equatable {
    var endpoint: String
    var keys: [String: String]
}

/// NH's registration descriptions in Atom XML, without the edge: what the SDKs send is read into a
/// registration, and what Herald answers reads back as the same registration.
@Suite("NH registration XML", .watchedForStalls)
struct NHRegistrationXMLTests {
    /// An `<entry>` around one description, as the .NET SDK writes it.
    static func entry(_ description: String) -> [UInt8] {
        Array(
            """
            <?xml version="1.0" encoding="utf-8"?><entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">\
            \(description)</content></entry>
            """.utf8)
    }

    static func parse(_ kind: String, _ fields: String) throws -> HubRegistration {
        try NHRegistrationXML.parse(entry(nhDescription(kind, fields)))
    }

    /// The invalid-argument message of a refused body, or nil when it was taken.
    static func refusal(_ body: [UInt8]) -> String? {
        do {
            _ = try NHRegistrationXML.parse(body)
            return nil
        } catch let error as ServiceError {
            return error.code == .invalidArgument ? error.message : "not invalidArgument: \(error)"
        } catch {
            return "not a ServiceError: \(error)"
        }
    }

    @Test("each platform's native description: its handle element, tags trimmed, empty tags dropped")
    func natives() throws {
        let apple = try Self.parse(
            "AppleRegistrationDescription", "<Tags> a, b ,,c </Tags><DeviceToken>ABCD</DeviceToken>")
        #expect(apple.platform == .apns && apple.handle == "ABCD" && apple.tags == ["a", "b", "c"])
        #expect(!apple.isTemplate && apple.registrationID.isEmpty)
        let fcm = try Self.parse("FcmV1RegistrationDescription", "<FcmV1RegistrationId>tok</FcmV1RegistrationId>")
        #expect(fcm.platform == .fcm && fcm.handle == "tok" && fcm.tags.isEmpty)
        let wns = try Self.parse(
            "WindowsRegistrationDescription", "<ChannelUri>https://x.notify.windows.com/?token=a&amp;b</ChannelUri>")
        #expect(wns.platform == .wns && wns.handle == "https://x.notify.windows.com/?token=a&b")
        let browser = try Self.parse(
            "BrowserRegistrationDescription",
            "<Endpoint>https://push.example/e</Endpoint><P256DH>key</P256DH><Auth>secret</Auth>")
        #expect(browser.platform == .browser)
        let subscription = try #require(
            try JSONSerialization.jsonObject(with: Data(browser.handle.utf8)) as? [String: Any])
        #expect(subscription["endpoint"] as? String == "https://push.example/e")
        #expect((subscription["keys"] as? [String: String]) == ["p256dh": "key", "auth": "secret"])
    }

    @Test("templates: body in CDATA, name, expiry, priority and APNs headers, in any element order")
    func templates() throws {
        // The JS SDK's order (TemplateName before Expiry), fields NH adds that Herald ignores, and
        // the body split across text and CDATA.
        let fields = """
            <ETag>3</ETag><ExpirationTime>9999-12-31T23:59:59.999Z</ExpirationTime><RegistrationId>r-9</RegistrationId>\
            <Tags>t</Tags><DeviceToken>AB</DeviceToken><BodyTemplate><![CDATA[{"aps":{"alert":"$(m)"}}]]></BodyTemplate>\
            <TemplateName>greeting</TemplateName><Expiry>$(exp)</Expiry><Priority>5</Priority>\
            <ApnsHeaders><ApnsHeader><Header>apns-push-type</Header><Value>alert</Value></ApnsHeader>\
            <ApnsHeader><Value>ignored: no Header</Value></ApnsHeader>\
            <ApnsHeader><Header>apns-collapse-id</Header><Value>c</Value></ApnsHeader></ApnsHeaders>
            """
        let r = try Self.parse("AppleTemplateRegistrationDescription", fields)
        #expect(r.isTemplate && r.platform == .apns && r.handle == "AB")
        #expect(r.bodyTemplate == #"{"aps":{"alert":"$(m)"}}"#)
        #expect(r.templateName == "greeting" && r.expiry == "$(exp)" && r.priority == "5")
        #expect(
            r.headers == [
                HubRegistrationField(name: "apns-push-type", value: "alert"),
                HubRegistrationField(name: "apns-collapse-id", value: "c"),
            ])
        // The id NH writes in a description is not taken from it: the path names the registration.
        #expect(r.registrationID.isEmpty)

        let wns = try Self.parse(
            "WindowsTemplateRegistrationDescription",
            """
            <ChannelUri>https://x.notify.windows.com/?token=a</ChannelUri><BodyTemplate>&lt;toast/&gt;</BodyTemplate>\
            <WnsHeaders><WnsHeader><Header>X-WNS-Type</Header><Value>wns/toast</Value></WnsHeader></WnsHeaders>
            """)
        #expect(wns.isTemplate && wns.bodyTemplate == "<toast/>" && wns.templateName.isEmpty)
        #expect(wns.headers == [HubRegistrationField(name: "X-WNS-Type", value: "wns/toast")])
    }

    @Test("i:nil is an absent field; the first of two same-named fields is kept; prefixed names are read")
    func nilsAndPrefixes() throws {
        let r = try Self.parse(
            "AppleTemplateRegistrationDescription",
            """
            <DeviceToken>AB</DeviceToken><DeviceToken>CD</DeviceToken><BodyTemplate>{}</BodyTemplate>\
            <Expiry i:nil="true"/><Tags i:nil="true"></Tags>
            """)
        #expect(r.handle == "AB" && r.expiry.isEmpty && r.tags.isEmpty)
        let prefixed = try NHRegistrationXML.parse(
            Array(
                """
                <a:entry xmlns:a="http://www.w3.org/2005/Atom"><a:content type="application/xml">\
                <n:FcmV1RegistrationDescription xmlns:n="\(NHRegistrationXML.namespace)">\
                <n:FcmV1RegistrationId>tok</n:FcmV1RegistrationId></n:FcmV1RegistrationDescription></a:content></a:entry>
                """.utf8))
        #expect(prefixed.platform == .fcm && prefixed.handle == "tok")
    }

    @Test("PushVariables: a JSON object of strings, sorted by name; anything else is refused")
    func pushVariables() throws {
        let r = try Self.parse(
            "AppleRegistrationDescription",
            #"<DeviceToken>AB</DeviceToken><PushVariables>{"z":"1","a":"&lt;2&gt;"}</PushVariables>"#)
        #expect(
            r.pushVariables == [
                HubRegistrationField(name: "a", value: "<2>"), HubRegistrationField(name: "z", value: "1"),
            ])
        for bad in [#"{"a":1}"#, #"["a"]"#, "not json", #"{"a":{"b":"c"}}"#] {
            let body = Self.entry(
                nhDescription(
                    "AppleRegistrationDescription",
                    "<DeviceToken>AB</DeviceToken><PushVariables>\(xmlEscaped(bad))</PushVariables>"))
            #expect(Self.refusal(body)?.contains("PushVariables") == true, "\(bad)")
        }
    }

    @Test(
        "refused with what to do: legacy FCM, unknown kinds, a missing handle or body, no description, two, another root",
        arguments: [
            (nhDescription("GcmRegistrationDescription", "<GcmRegistrationId>x</GcmRegistrationId>"), "FcmV1"),
            (nhDescription("FcmRegistrationDescription", "<FcmRegistrationId>x</FcmRegistrationId>"), "retired"),
            (nhDescription("MpnsRegistrationDescription", "<ChannelUri>x</ChannelUri>"), "not supported"),
            (nhDescription("AppleThing", "<DeviceToken>x</DeviceToken>"), "not a registration description"),
            (nhDescription("AppleRegistrationDescription", "<Tags>a</Tags>"), "needs DeviceToken"),
            (nhDescription("AppleRegistrationDescription", "<DeviceToken></DeviceToken>"), "needs DeviceToken"),
            (nhDescription("BrowserRegistrationDescription", "<Endpoint>e</Endpoint><P256DH>k</P256DH>"), "needs Auth"),
            (
                nhDescription("AppleTemplateRegistrationDescription", "<DeviceToken>x</DeviceToken>"),
                "needs BodyTemplate"
            ),
            ("", "no …RegistrationDescription"),
            (
                nhDescription("AppleRegistrationDescription", "<DeviceToken>x</DeviceToken>")
                    + nhDescription("AppleRegistrationDescription", "<DeviceToken>y</DeviceToken>"),
                "more than one description"
            ),
        ])
    func refused(description: String, reason: String) {
        let message = Self.refusal(Self.entry(description))
        #expect(message?.contains(reason) == true, "\(message ?? "taken")")
    }

    @Test("bodies that are not an entry are refused as such, not parsed in part")
    func notEntries() {
        let cases: [(String, String)] = [
            ("<feed><content><AppleRegistrationDescription/></content></feed>", "not <entry>"),
            ("<entry><content>", "not a registration description in Atom XML"),
            ("{\"platform\":\"apns\"}", "not a registration description in Atom XML"),
            (
                "<entry>" + String(repeating: "<x>", count: NHRegistrationXML.maxDepth)
                    + String(repeating: "</x>", count: NHRegistrationXML.maxDepth) + "</entry>",
                "not a registration description in Atom XML"
            ),
            (
                "<entry>" + String(repeating: "<x/>", count: NHRegistrationXML.maxElements) + "</entry>",
                "not a registration description in Atom XML"
            ),
        ]
        for (body, reason) in cases {
            let message = Self.refusal(Array(body.utf8))
            #expect(message?.contains(reason) == true, "\(body.prefix(60)): \(message ?? "taken")")
        }
    }

    @Test("an entry Herald writes reads back as the registration, for every platform, native and template")
    func roundTrip() throws {
        let handles: [(Platform, String)] = [
            (.apns, "ABCDEF"), (.fcm, "fcm-token"), (.wns, "https://x.notify.windows.com/?token=a&b=<c>"),
            (.browser, #"{"endpoint":"https://push.example/e?a=1&b=2","keys":{"auth":"s","p256dh":"k"}}"#),
        ]
        for (platform, handle) in handles {
            for isTemplate in [false, true] {
                var r = HubRegistration(
                    registrationID: "r-1", platform: platform, handle: handle, tags: ["a", "username:b"],
                    pushVariables: [HubRegistrationField(name: "n\"1", value: "v<&>")], etag: 4,
                    updatedAtUnixMs: 1_704_096_000_000, createdAtUnixMs: 1_704_067_200_000)
                if isTemplate {
                    r.isTemplate = true
                    // A body holding CDATA's own end is split across two sections, and reads back whole.
                    r.bodyTemplate = #"{"aps":{"alert":"$(m) ]]> <&>"}}"#
                    r.templateName = "t&1"
                    if platform == .apns {
                        r.expiry = "$(exp)"
                        r.priority = "10"
                    }
                    if platform == .apns || platform == .wns {
                        r.headers = [HubRegistrationField(name: "h", value: "<v>")]
                    }
                }
                let xml = NHRegistrationXML.entry(r, url: "https://h/hub/registrations/r-1?x=1&y=2")
                #expect(XMLParser(data: Data(xml.utf8)).parse(), "\(platform) \(isTemplate): \(xml)")
                var back = try NHRegistrationXML.parse(Array(xml.utf8))
                #expect(xml.contains("<RegistrationId>r-1</RegistrationId><Tags>a,username:b</Tags>"))
                #expect(xml.contains(#"a:etag="W/&quot;4&quot;""#) && xml.contains("<ETag>4</ETag>"))
                #expect(xml.contains("<published>2024-01-01T00:00:00Z</published>"))
                #expect(xml.contains("<updated>2024-01-01T08:00:00Z</updated>"))
                // What the description does not carry: the path's id and the server's fields.
                back.registrationID = r.registrationID
                back.etag = r.etag
                back.updatedAtUnixMs = r.updatedAtUnixMs
                back.createdAtUnixMs = r.createdAtUnixMs
                if platform == .browser {
                    // The handle reads back as the same subscription, keys in JSON's own order.
                    let written = try JSONDecoder().decode(Subscription.self, from: Data(back.handle.utf8))
                    #expect(try written == JSONDecoder().decode(Subscription.self, from: Data(r.handle.utf8)))
                    back.handle = r.handle
                }
                #expect(back == r, "\(platform) \(isTemplate)")
            }
        }
    }

    @Test("a template with no expiry writes Expiry as nil, in the .NET SDK's element order")
    func apnsTemplateOrder() {
        let r = HubRegistration(
            registrationID: "r", platform: .apns, handle: "AB", isTemplate: true, templateName: "t",
            bodyTemplate: "{}")
        let xml = NHRegistrationXML.description(r)
        #expect(xml.hasPrefix("<AppleTemplateRegistrationDescription xmlns=\"\(NHRegistrationXML.namespace)\""))
        let order = [
            "<ETag>", "<ExpirationTime>", "<RegistrationId>", "<DeviceToken>", "<BodyTemplate>",
            "<Expiry i:nil=\"true\"/>", "<TemplateName>", "<ApnsHeaders>",
        ]
        let positions = order.map { xml.range(of: $0)?.lowerBound }
        #expect(!positions.contains(nil), "\(xml)")
        #expect(positions.compactMap { $0 } == positions.compactMap { $0 }.sorted(), "\(xml)")
        #expect(!xml.contains("<Priority>") && !xml.contains("<Tags>") && !xml.contains("<PushVariables>"))
    }

    @Test("a feed holds one entry per registration, each at its own address under the base")
    func feed() throws {
        let registrations = ["r1", "r2"].map {
            HubRegistration(registrationID: $0, platform: .fcm, handle: "t-\($0)")
        }
        let xml = NHRegistrationXML.feed(
            registrations, url: "https://h/hub/registrations?a=1&b=2", base: "https://h/hub/registrations/", now: 0)
        #expect(XMLParser(data: Data(xml.utf8)).parse())
        #expect(xml.hasPrefix(#"<feed xmlns="http://www.w3.org/2005/Atom"><title type="text">Registrations</title>"#))
        #expect(xml.contains("<id>https://h/hub/registrations?a=1&amp;b=2</id><updated>1970-01-01T00:00:00Z</updated>"))
        for id in ["r1", "r2"] {
            #expect(xml.contains(#"<link rel="self" href="https://h/hub/registrations/\#(id)"/>"#))
            #expect(xml.contains("<FcmV1RegistrationId>t-\(id)</FcmV1RegistrationId>"))
        }
        // Entries inside a feed do not declare Atom's namespace again.
        #expect(xml.components(separatedBy: "http://www.w3.org/2005/Atom").count == 2)
        #expect(
            NHRegistrationXML.feed([], url: "u", base: "b", now: 0).hasSuffix("<link rel=\"self\" href=\"u\"/></feed>"))
    }
}
