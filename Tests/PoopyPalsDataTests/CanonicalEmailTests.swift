import Foundation
@testable import PoopyPalsData
import PostgresClient
import Testing
import TestSupport

/// One person, one profile, whatever Unicode form their email arrives in (Email.swift holds the rules and the
/// standards they come from). Before, each variant below made a users row of its own beside ann@example.com.
@Suite("Emails: one canonical form")
struct CanonicalEmailTests {
    @Test(arguments: [
        (" Ann@Example.COM ", "ann@example.com"),
        ("\u{E1}nn@example.com", "\u{E1}nn@example.com"),        // á precomposed
        ("a\u{301}nn@example.com", "\u{E1}nn@example.com"),       // a + combining acute: canonically equivalent
        ("\u{FF41}nn@example.com", "ann@example.com"),            // fullwidth a: compatibility-equivalent
        ("\u{FB01}@example.com", "fi@example.com"),               // the ligature ﬁ
        ("ann@ex\u{E4}mple.com", "ann@xn--exmple-cua.com"),       // a Unicode domain label …
        ("ann@xn--exmple-cua.com", "ann@xn--exmple-cua.com"),     // … and its A-label are one domain
        ("ann@XN--EXMPLE-CUA.COM", "ann@xn--exmple-cua.com"),
        ("ann@EX\u{C4}MPLE.com", "ann@xn--exmple-cua.com"),
        ("ann@b\u{FC}cher.example", "ann@xn--bcher-kva.example"), // RFC 3492's own example
        ("\u{212A}ate@example.com", "kate@example.com"),          // KELVIN SIGN
        ("\u{212B}sa@example.com", "\u{E5}sa@example.com"),       // ANGSTROM SIGN
        ("Stra\u{DF}e@example.com", "stra\u{DF}e@example.com"),   // ß stays ß: simple folding (issue 42, item 6) …
        ("STRA\u{1E9E}E@example.com", "stra\u{DF}e@example.com"),  // … capital ẞ folds to it …
        ("STRASSE@example.com", "strasse@example.com"),           // … and strasse is another mailbox
        ("ann@example\u{3002}com", "ann@example.com"),            // ideographic full stop separates labels
        ("ann@example\u{FF0E}com", "ann@example.com"),            // fullwidth full stop
        ("ann\u{FF20}example.com", "ann@example.com"),            // fullwidth commercial at
        ("\u{13A0}nn@example.com", "\u{AB70}nn@example.com"),     // Cherokee: small letters, as lower() keeps them
        ("ann@fa\u{DF}.de", "ann@xn--fa-hia.de"),                // ß stays in a domain (UTS #46 non-transitional) …
        ("ann@FASS.de", "ann@fass.de"),                          // … so faß.de and fass.de are two domains
        ("ann@xn--fa-hia.de", "ann@xn--fa-hia.de"),
    ])
    func variantsOfOneAddressHaveOneCanonicalForm(_ raw: String, _ canonical: String) throws {
        // As scalars: String's == takes canonically equivalent spellings as equal.
        #expect(Array(try Email(raw).normalized.unicodeScalars) == Array(canonical.unicodeScalars))
        #expect(Array(try Email(canonical).normalized.unicodeScalars) == Array(canonical.unicodeScalars))  // a fixed point
    }

    /// Every canonical form passes the database's own checks (users_email_normalized, users_email_canonical): a
    /// form they refused would turn a valid request into a 500 (Cherokee capitals did, under lower()).
    @Test func canonicalFormsPassTheDatabaseChecks() async throws {
        let inputs = ["ann@example.com", "a\u{301}nn@example.com", "\u{FF41}nn@example.com", "\u{FB01}@example.com", "ann@ex\u{E4}mple.com",
                      "\u{212A}ate@example.com", "\u{212B}sa@example.com", "Stra\u{DF}e@example.com", "\u{13A0}nn@example.com",
                      "\u{AB70}nn@example.com", "ann@fa\u{DF}.de", "\u{130}rem@example.com", "\u{1F88}@example.gr",
                      "\u{4ED6}\u{4EEC}@\u{4F8B}\u{5B50}.\u{6D4B}\u{8BD5}", "\u{43F}\u{440}\u{438}\u{43C}\u{435}\u{440}@\u{43F}\u{440}\u{438}\u{43C}\u{435}\u{440}.\u{440}\u{444}"]
        try await TestDatabase.withMigrated { db in
            try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                    var seen: Set<[UInt8]> = []
                    for input in inputs {
                        let email = try Email(input).normalized
                        guard seen.insert(Array(email.utf8)).inserted else { continue }  // ａnn is ann
                        try conn.execute("INSERT INTO users (id, email) VALUES (\(UUID()), \(email))")
                    }
                    #expect(seen.count == inputs.count - 2)  // ａnn is ann, Ꭰnn is ꭰnn
                }
            }
        }
    }

    /// Different letters that look alike are different addresses: no standard maps them together, and they can
    /// be different mailboxes. Turkish dotless ı is its own letter under case folding; İ folds to i + U+0307.
    @Test func lookAlikeLettersStayDifferentAddresses() throws {
        let forms = try ["ann@example.com", "\u{430}nn@example.com", "irem@example.com", "\u{131}rem@example.com",
                         "\u{130}rem@example.com"].map { try Email($0).normalized }
        #expect(Set(forms).count == forms.count)
        #expect(forms[1] == "\u{430}nn@example.com")  // Cyrillic а kept
        #expect(forms[4] == "i\u{307}rem@example.com")
        #expect(try Email("IREM@example.com").normalized == "irem@example.com")
    }

    @Test(arguments: [
        "ann\u{200B}@example.com", "ann@example.com\u{200D}", "ann@example.com\n", "ann@example.com\t", "\tann@example.com",
        "ann@exa\r\nmple.com", "\u{202E}ann@example.com", "ann\u{AD}@example.com", "ann\u{FEFF}@example.com",
        "ann@example.com\u{0}", "ann\u{E000}@example.com", "ann@ex\u{378}ample.com", "ann\u{3000}@example.com",
        "ann\u{A0}@example.com", "ann@example.com\u{2028}", "a\u{7F}nn@example.com", "ann\u{1F}@example.com",
        "ann@xn--.com", "ann@xn--a.com", "ann@xn--exmple-cu!.com", "ann@ex_\u{E4}mple.com",
        "a@\u{301}b@example.com", "a\"\u{301}@example.com", "a,\u{301}@example.com", "ann@\u{301}example.com",
        // Not host names after mapping (issue 42, item 6): an address literal, hyphens at a label's ends, an
        // underscore, and characters NFKC turns into a dot, parentheses or a slash.
        "a@[127.0.0.1]", "a@-example.com", "a@example-.com", "a@exa_mple.com", "a@a\u{2024}com", "a@\u{2474}.com",
        "a@\u{2100}.com", "a@ex\u{E4}mple-.com", "a@\u{2488}com",
    ])
    func invisibleControlAndInvalidCharactersAreRefused(_ raw: String) {
        let error = #expect(throws: InvalidField.self) { try Email(raw) }
        #expect(error?.field == "email")
    }

    /// Stored emails the current rule refuses outright have no canonical form for a merge to rewrite them to: the
    /// monitor names their users (ids only), and fails, so that someone asks those people for another address.
    @Test func theMonitorNamesStoredEmailsTheRuleRefuses() async throws {
        try await TestDatabase.withMigrated { db in
            let (literal, hyphen, fine) = (UUID(), UUID(), UUID())
            let clean = try await TestProject.run(["monitor", "duplicate-emails", "--database-url", db.url])
            #expect(clean.status == 0, "\(clean.stdout) \(clean.stderr)")
            try await db.withConnection { conn in
                try conn.transaction { conn in
                    try conn.query("SELECT set_config('role', poopypals_profiles_role(), true)")
                    for (id, email) in [(literal, "a@[127.0.0.1]"), (hyphen, "b@-example.com"), (fine, "c@example.com")] {
                        try conn.execute("INSERT INTO users (id, email) VALUES (\(id), \(email))")
                    }
                }
            }
            let report = try await TestProject.run(["monitor", "duplicate-emails", "--database-url", db.url])
            #expect(report.status == 1)
            #expect(report.stdout.contains("2 stored emails are refused by the current rule"), "\(report.stdout)")
            #expect(report.stdout.contains(literal.uuidString.lowercased()) && report.stdout.contains(hyphen.uuidString.lowercased()))
            #expect(!report.stdout.contains(fine.uuidString.lowercased()) && !report.stdout.contains("127.0.0.1"))
            let json = try await TestProject.run(["monitor", "duplicate-emails", "--json", "--database-url", db.url])
            #expect(json.stdout.contains("refusedEmailUserIds"), "\(json.stdout)")
        }
    }

    /// Spot checks against CaseFolding.txt (full folding, status C + F).
    @Test func caseFoldingAgreesWithUnicode() {
        let folds: [(String, String)] = [
            ("ABC", "abc"), ("\u{DF}", "ss"), ("\u{1E9E}", "ss"), ("\u{3C2}", "\u{3C3}"), ("\u{17F}", "s"),
            ("\u{130}", "i\u{307}"), ("\u{131}", "\u{131}"), ("\u{1F88}", "\u{1F00}\u{3B9}"), ("\u{1C5}", "\u{1C6}"),
            ("\u{3D0}", "\u{3B2}"), ("\u{212A}", "k"), ("\u{149}", "\u{2BC}n"),
            // Cherokee: one class either way; we keep the small letters (folding picks the capitals).
            ("\u{13A0}", "\u{AB70}"), ("\u{AB70}", "\u{AB70}"),
        ]
        for (text, folded) in folds {
            #expect(Array(Email.caseFolded(text).unicodeScalars) == Array(folded.unicodeScalars), "\(text.debugDescription)")
        }
        #expect(Email.caseFolded("FA\u{DF}\u{3C2}", keepingDeviations: true) == "fa\u{DF}\u{3C2}")
    }

    /// Spot checks against CaseFolding.txt's simple folding (status C + S), the local part's.
    @Test func simpleCaseFoldingAgreesWithUnicode() {
        let folds: [(String, String)] = [
            ("ABC", "abc"), ("\u{DF}", "\u{DF}"), ("\u{1E9E}", "\u{DF}"), ("\u{3C2}", "\u{3C3}"), ("\u{17F}", "s"),
            ("\u{131}", "\u{131}"), ("\u{1F88}", "\u{1F80}"), ("\u{1C5}", "\u{1C6}"), ("\u{3D0}", "\u{3B2}"),
            ("\u{212A}", "k"), ("\u{149}", "\u{149}"), ("\u{13A0}", "\u{AB70}"),
            // İ has no simple folding; its lower case, as the database's lower() check needs.
            ("\u{130}", "i\u{307}"),
        ]
        for (text, folded) in folds {
            #expect(Array(Email.simpleCaseFolded(text).unicodeScalars) == Array(folded.unicodeScalars), "\(text.debugDescription)")
        }
    }

    @Test func punycodeRoundTripsAndRefusesGarbage() {
        let samples: [(String, String)] = [("b\u{FC}cher", "bcher-kva"), ("m\u{FC}nchen", "mnchen-3ya"), ("ex\u{E4}mple", "exmple-cua"),
                                           ("\u{4ED6}\u{4EEC}\u{4E3A}\u{4EC0}\u{4E48}\u{4E0D}\u{8BF4}\u{4E2D}\u{6587}", "ihqwcrb4cv8a8dqg056pqjye")]
        for (unicode, puny) in samples {
            #expect(Punycode.encode(Array(unicode.unicodeScalars)) == puny)
            #expect(Punycode.decode(puny).map { String(String.UnicodeScalarView($0)) } == unicode)
        }
        for garbage in ["!", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "a-\u{E9}", "99999999999"] {
            let decoded = Punycode.decode(garbage)
            #expect(decoded == nil || decoded.map { Punycode.encode($0) } != garbage, "\(garbage)")
        }
    }

    /// What the monitor and the merge group stored rows by: invisible characters written before these rules
    /// are dropped, so such a row falls in with the address it imitates.
    @Test func storedRowsAreGroupedUnderTheirCanonicalForm() {
        #expect(Email.comparisonKey(forStored: "ann\u{200B}@example.com") == "ann@example.com")
        #expect(Email.comparisonKey(forStored: "ann@example.com\u{200D}\n") == "ann@example.com")
        #expect(Email.comparisonKey(forStored: "not an address") == nil)
        #expect(DuplicateEmails.key(" Not An Address ") == "not an address")
    }
}
