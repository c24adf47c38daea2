public import Foundation

/// APNs provider certificates made by `openssl` for the tests, as Apple issues them: the app's
/// bundle id in the subject's UID, "Apple Push Services: <bundle id>" as the common name, client
/// authentication as the extended key usage; exported as a `.p12` with a password (the ciphers a
/// Keychain export uses) and as PEM. Also a server certificate for 127.0.0.1 from the same CA (the
/// push-service doubles), one certificate that has ended, and one from a CA nobody trusts.
public struct APNsTestCertificates: Sendable {
    public static let topic = "com.example.certapp"
    public static let password = "s3cret p12"

    public let folder: String
    /// The CA of the client and server certificates (PEM file).
    public let ca: String
    /// 127.0.0.1's certificate and key (PEM files), for a push-service double.
    public let serverCertificate: String
    public let serverKey: String
    /// The provider certificate with its key and the CA, as a `.p12` (``password``).
    public let p12: [UInt8]
    /// The same certificate and its key in one PEM file, the key unencrypted.
    public let pem: [UInt8]
    /// A certificate of the same CA that ended yesterday (`.p12`, ``password``).
    public let expiredP12: [UInt8]
    /// A certificate from a CA no double trusts (`.p12`, ``password``).
    public let strangerP12: [UInt8]
    /// When ``p12``'s certificate ends, Unix seconds (read back by openssl).
    public let notValidAfter: Int64

    public static func make(in folder: String) async throws -> APNsTestCertificates {
        guard let openssl = which("openssl") else { throw Failure("openssl is needed to make test certificates") }
        func run(_ arguments: [String]) async throws -> String {
            let result = try await runProgram(openssl, arguments)
            guard result.status == 0 else { throw Failure("openssl \(arguments.prefix(2)): \(result.error)") }
            return result.output
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        for ca in ["ca", "stranger-ca"] {
            _ = try await run(
                ["req", "-x509"] + ec + [
                    "-keyout", "\(folder)/\(ca).key", "-out", "\(folder)/\(ca).pem", "-days", "2", "-subj",
                    "/CN=herald-test-\(ca)",
                ])
        }
        try """
        basicConstraints=CA:FALSE
        extendedKeyUsage=clientAuth

        """.write(toFile: "\(folder)/client.ext", atomically: true, encoding: .utf8)
        try """
        basicConstraints=CA:FALSE
        subjectAltName=IP:127.0.0.1,DNS:localhost
        extendedKeyUsage=serverAuth

        """.write(toFile: "\(folder)/server.ext", atomically: true, encoding: .utf8)
        let subject = "/UID=\(topic)/CN=Apple Push Services: \(topic)/OU=TEAM123456/O=Herald Test/C=US"
        // name, CA, days (-1: ended yesterday), extensions, subject
        let made = [
            ("provider", "ca", "2", "client", subject), ("expired", "ca", "-1", "client", subject),
            ("stranger", "stranger-ca", "2", "client", subject), ("server", "ca", "2", "server", "/CN=127.0.0.1"),
        ]
        for (name, ca, days, ext, subject) in made {
            _ = try await run(
                ["req"] + ec + ["-keyout", "\(folder)/\(name).key", "-out", "\(folder)/\(name).csr", "-subj", subject])
            _ = try await run([
                "x509", "-req", "-in", "\(folder)/\(name).csr", "-CA", "\(folder)/\(ca).pem", "-CAkey",
                "\(folder)/\(ca).key", "-CAcreateserial", "-out", "\(folder)/\(name).pem", "-days", days, "-extfile",
                "\(folder)/\(ext).ext",
            ])
        }
        func p12(_ name: String, _ ca: String) async throws -> [UInt8] {
            // 3DES and SHA-1, as a Keychain export (openssl 3's default is AES and PBKDF2).
            _ = try await run([
                "pkcs12", "-export", "-inkey", "\(folder)/\(name).key", "-in", "\(folder)/\(name).pem", "-certfile",
                "\(folder)/\(ca).pem", "-passout", "pass:\(password)", "-keypbe", "PBE-SHA1-3DES", "-certpbe",
                "PBE-SHA1-3DES", "-macalg", "sha1", "-out", "\(folder)/\(name).p12",
            ])
            return try Array(Data(contentsOf: URL(fileURLWithPath: "\(folder)/\(name).p12")))
        }
        let end = try await run(["x509", "-in", "\(folder)/provider.pem", "-noout", "-enddate"])
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "MMM d HH:mm:ss yyyy zzz"
        let text = end.replacingOccurrences(of: "notAfter=", with: "").trimmingCharacters(in: .whitespacesAndNewlines)
            .replacingOccurrences(of: "  ", with: " ")
        guard let date = formatter.date(from: text) else { throw Failure("openssl's end date \(text) is unreadable") }
        let pem =
            try Data(contentsOf: URL(fileURLWithPath: "\(folder)/provider.pem"))
            + Data(contentsOf: URL(fileURLWithPath: "\(folder)/provider.key"))
        return APNsTestCertificates(
            folder: folder, ca: "\(folder)/ca.pem", serverCertificate: "\(folder)/server.pem",
            serverKey: "\(folder)/server.key", p12: try await p12("provider", "ca"), pem: Array(pem),
            expiredP12: try await p12("expired", "ca"), strangerP12: try await p12("stranger", "stranger-ca"),
            notValidAfter: Int64(date.timeIntervalSince1970))
    }

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        init(_ description: String) { self.description = description }
    }
}
