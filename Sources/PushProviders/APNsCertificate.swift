import Foundation
public import NIOSSL
import SwiftASN1
import X509

/// An APNs provider certificate with its private key (certificate-based authentication): the
/// `.p12` Keychain exports (PKCS#12, with its password), or PEM (the certificate chain and the
/// private key in one file, the key perhaps encrypted with the password).
///
/// APNs authenticates the connection by the TLS client certificate, so no request carries a
/// provider token; the certificate names the app in its subject's UID (`0.9.2342.19200300.100.1.1`),
/// which APNs takes as the default `apns-topic` and Herald takes as the topic when none is given.
public struct APNsCertificate: Sendable {
    /// The leaf first.
    public let chain: [NIOSSLCertificate]
    public let key: NIOSSLPrivateKey
    /// When the leaf stops being valid, Unix seconds.
    public let notValidAfter: Int64
    /// The subject's UID (the app's bundle id), when it has one.
    public let topic: String?
    /// The subject's common name ("Apple Push Services: com.example.app"), for summaries.
    public let commonName: String

    /// Parses a `.p12` (DER) or PEM file. A wrong password, a file that is neither, a PEM without
    /// a private key or a key that is not the certificate's throws ``Problem`` saying which (never
    /// the password). Never asks for a passphrase on a terminal (BoringSSL's default for an
    /// encrypted PEM key without a callback).
    public init(file: [UInt8], password: String) throws {
        guard file.count <= Self.maximumSize else { throw Problem("the certificate file is over 64 KiB") }
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        if Self.isPEM(file) {
            do { chain = try NIOSSLCertificate.fromPEMBytes(file) } catch {
                throw Problem("the PEM file holds no readable certificate")
            }
            guard String(decoding: file, as: UTF8.self).contains("PRIVATE KEY-----") else {
                throw Problem("the PEM file holds no private key: put the key after the certificate")
            }
            do {
                key = try NIOSSLPrivateKey(bytes: file, format: .pem) { (setter: NIOSSLPassphraseSetter<[UInt8]>) in
                    setter(Array(password.utf8))
                }
            } catch {
                throw Problem("the PEM file's private key cannot be read (is the password right?)")
            }
        } else {
            let bundle: NIOSSLPKCS12Bundle
            do { bundle = try NIOSSLPKCS12Bundle(buffer: file, passphrase: Array(password.utf8)) } catch {
                throw Problem("the file is not a PKCS#12 (.p12) file this password opens, nor PEM")
            }
            chain = bundle.certificateChain
            key = bundle.privateKey
        }
        guard let leaf = chain.first else { throw Problem("the file holds no certificate") }
        let parsed: Certificate
        do { parsed = try Certificate(derEncoded: try leaf.toDERBytes()) } catch {
            throw Problem("the certificate cannot be parsed")
        }
        // The key must be the leaf's (checked here, rather than at the first connection), by the
        // public keys, not by a probe NIOSSLContext: swift-nio-ssl 2.37.6's NIOSSLContext.init
        // does not free its SSL_CTX when it throws, so each mismatched upload leaked ~800 KB (the
        // context and the system's trust roots it had loaded; found by `scripts/fuzz.sh credentials`).
        guard let publicKey = Self.publicKey(of: key), publicKey == parsed.publicKey else {
            throw Problem("the private key is not the certificate's")
        }
        self.chain = chain
        self.key = key
        notValidAfter = Int64(leaf.notValidAfter)
        topic = Self.attribute(Self.userID, of: parsed.subject)
        commonName = Self.attribute(.RDNAttributeType.commonName, of: parsed.subject) ?? ""
    }

    /// The public half of `key` (an RSA key of 2048 bits or more, or an ECDSA P-256/384/521 key,
    /// as BoringSSL writes it in DER: PKCS#1 or SEC1), nil for any other key.
    static func publicKey(of key: NIOSSLPrivateKey) -> Certificate.PublicKey? {
        guard let der = try? key.derBytes else { return nil }
        for type in ["RSA PRIVATE KEY", "EC PRIVATE KEY"] {
            if let parsed = try? Certificate.PrivateKey(pemDocument: PEMDocument(type: type, derBytes: der)) {
                return parsed.publicKey
            }
        }
        return nil
    }

    /// A file larger than this is refused unread (a `.p12` with its chain is a few KiB).
    public static let maximumSize = 64 * 1024

    /// The subject attribute APNs reads the topic from (`UID`, RFC 4519).
    static let userID: ASN1ObjectIdentifier = [0, 9, 2342, 19_200_300, 100, 1, 1]

    public struct Problem: Error, CustomStringConvertible, Sendable {
        public var description: String
        init(_ description: String) { self.description = description }
    }

    /// ``notValidAfter`` in Unix milliseconds, as the RPCs carry times.
    public var notValidAfterUnixMs: Int64 { min(notValidAfter, Int64.max / 1000) * 1000 }

    /// Whether the certificate has ended at `now` (Unix seconds).
    public func expired(at now: Int64) -> Bool { now >= notValidAfter }

    /// The client TLS configuration `base` with this certificate and key presented.
    public func presented(in base: TLSConfiguration) -> TLSConfiguration {
        var configuration = base
        configuration.certificateChain = chain.map { .certificate($0) }
        configuration.privateKey = .privateKey(key)
        return configuration
    }

    static func isPEM(_ file: [UInt8]) -> Bool {
        String(decoding: file.prefix(4096), as: UTF8.self).contains("-----BEGIN ")
    }

    static func attribute(_ type: ASN1ObjectIdentifier, of name: DistinguishedName) -> String? {
        for rdn in name {
            for attribute in rdn where attribute.type == type {
                if let text = String(attribute.value) { return text }
            }
        }
        return nil
    }
}
