import Edge
import Foundation
import HeraldTestSupport
import Testing

/// `PUT api/register/{id}`'s body: the flat reader and `JSONSerialization` answer alike.
@Suite("registration body", .watchedForStalls)
struct RegistrationBodyTests {
    /// Each outcome as comparable text: the body read, or the error's status and message.
    static func outcome(_ read: () throws -> RegistrationBody) -> String {
        do { return "\(try read())" } catch let error as EdgeError {
            return "\(error.status.code) \(error.message)"
        } catch { return "\(error)" }
    }

    static let plain: [String] = [
        #"{"Platform":"apns","Handle":"0a0b","Tags":["news","sports"]}"#,
        #"{"platform":"fcm","handle":"tok","tags":null}"#,
        #"{"PLATFORM":"wns","HANDLE":"https://x.notify.windows.com/a","TAGS":[]}"#,
        #" { "Platform" : "gcm" , "Handle" : "h" } "#,
        "{\"Platform\":\"apns\",\n\t\"Handle\":\"h\",\r\n\"Tags\":[ \"a\" , \"b\" ]}",
        #"{"Platform":"apns","Handle":"a\"b\\c\/d\b\f\n\r\t","Tags":["\u00e9\u0041\u20ac"]}"#,
        #"{"Platform":"apns","Handle":"é 🔔 ü","Tags":["日本"]}"#,
        #"{"Platform":"apns","Handle":"h","Extra":"x","More":true,"Less":false,"None":null}"#,
        #"{"Platform":"mpns","Handle":"h"}"#,
        #"{"Platform":"nope","Handle":"h"}"#,
        #"{"Platform":"apns","Handle":"h","Tags":["with\u0000nul"]}"#,
        #"{"Handle":"h","Platform":"browser","Tags":["z"]}"#,
    ]

    static let other: [String] = [
        "", "{", "}", "[]", "null", "\"text\"", "{}", #"{"Platform":"apns"}"#, #"{"Handle":"h"}"#,
        #"{"Platform":"apns","Handle":""}"#, #"{"Platform":1,"Handle":"h"}"#, #"{"Platform":"apns","Handle":7}"#,
        #"{"Platform":"apns","Handle":"h","Tags":"one"}"#, #"{"Platform":"apns","Handle":"h","Tags":[1]}"#,
        #"{"Platform":"apns","Handle":"h","Tags":["a",]}"#, #"{"Platform":"apns","Handle":"h",}"#,
        #"{"Platform":"apns","Handle":"h"} x"#, #"{"Platform":"apns","Handle":"h"}}"#,
        #"{"Platform":"apns","Handle":"h","Count":3}"#,
        #"{"Platform":"apns","Handle":{"endpoint":"https://e","keys":{"p256dh":"p","auth":"a"}}}"#,
        #"{"Platform":"apns","Handle":"\ud83d\udd14"}"#, #"{"Platform":"apns","Handle":"\ud83d"}"#,
        #"{"Platform":"apns","Handle":"\x"}"#, #"{"Platform":"apns","Handle":"\u12"}"#,
        "{\"Platform\":\"apns\",\"Handle\":\"a\u{1}b\"}", #"{"Plat\u0066orm":"apns","Handle":"h"}"#,
        #"{"Platform":"apns","Handle":"h","Tags":nul}"#, #"{"Platform":"apns","Handle":"h","x":tru}"#,
        #"{"Platform":"apns","Handle":"h","x":[1,{"a":[]}]}"#, #"{"Platform":"apns" "Handle":"h"}"#,
        #"{"Platform":"apns","Handle":"h""#, #"{"Platform":"apns","Handle":"h"#,
    ]

    @Test("plain bodies are read without JSONSerialization, to the same fields")
    func plainBodies() {
        for body in Self.plain {
            let data = Data(body.utf8)
            #expect(FlatReader.read(data) != nil, "\(body)")
            #expect(
                Self.outcome { try RegistrationBody.parse(data) }
                    == Self.outcome { try RegistrationBody.parseWithFoundation(data) }, "\(body)")
        }
    }

    @Test("every other body gets JSONSerialization's answer")
    func otherBodies() {
        var bytes = Self.other.map { Array($0.utf8) }
        // Bytes that are not UTF-8, in a kept and in a skipped member.
        bytes.append(Array(#"{"Platform":"apns","Handle":""#.utf8) + [0xC3, 0x28] + Array(#""}"#.utf8))
        bytes.append(Array(#"{"Platform":"apns","Handle":"h","x":""#.utf8) + [0xFF] + Array(#""}"#.utf8))
        for body in bytes {
            let data = Data(body)
            #expect(
                Self.outcome { try RegistrationBody.parse(data) }
                    == Self.outcome { try RegistrationBody.parseWithFoundation(data) },
                "\(String(decoding: body, as: UTF8.self))")
        }
    }

    @Test("a name given twice, in any case, is left to JSONSerialization")
    func duplicateNames() {
        // Which of the two JSONSerialization's dictionary keeps is not fixed, even within one
        // process (each dictionary orders its keys by a seed of its own), so only the reader's
        // refusal is held here.
        for body in [
            #"{"Platform":"apns","platform":"fcm","Handle":"h"}"#, #"{"Platform":"apns","Handle":"h","HANDLE":"i"}"#,
            #"{"Platform":"apns","Handle":"h","Tags":[],"tags":null}"#,
        ] {
            #expect(FlatReader.read(Data(body.utf8)) == nil, "\(body)")
        }
    }

    @Test("every cut and every one-byte change of the plain bodies is answered alike")
    func mutations() {
        let alphabet = Array(#"{}[]",:\ u0aA"#.utf8) + [0x00, 0x1F, 0x7F, 0xC3, 0xFF]
        for body in Self.plain.map({ Array($0.utf8) }) {
            var variants: [[UInt8]] = (0...body.count).map { Array(body.prefix($0)) }
            for index in body.indices {
                for byte in alphabet {
                    variants.append(body)
                    variants[variants.count - 1][index] = byte
                }
            }
            for variant in variants {
                let data = Data(variant)
                let fast = FlatReader.read(data).map { _ in Self.outcome { try RegistrationBody.parse(data) } }
                guard let fast else { continue }
                #expect(
                    fast == Self.outcome { try RegistrationBody.parseWithFoundation(data) },
                    "\(String(decoding: variant, as: UTF8.self))")
            }
        }
    }
}
