-- poopypals:preflight duplicate-emails
-- poopypals:preflight canonical-emails
-- One users row per person, whatever Unicode form their email arrives in. The service stores every email in the
-- canonical form `Email` defines (Sources/PoopyPalsData/Email.swift: NFKC, case folding, IDNA A-labels, no
-- invisible or control characters), so users_email_unique compares canonical forms. The pre-flights refuse to go
-- on while stored rows collide under that form, or are not in it (a later update of such a row would break the
-- check below); each names how many, and `poopypals users merge-duplicates` merges and rewrites them.
--
-- What SQL can check of the canonical form, it checks here, for every new or changed row: NFKC-normalised, no
-- control, space or default-ignorable character (soft hyphen, combining grapheme joiner, Arabic letter mark, Hangul
-- fillers, Khmer vowel inherents, Mongolian selectors, zero-width and bidi controls, word joiner and invisible
-- operators, variation selectors, BOM, specials), and an ASCII domain (A-labels). Case folding and Punycode are
-- the service's. A legacy value that is no address at all leaves the check NOT VALID, as users_email_normalized
-- did (new and changed rows are still checked); adding it is a short metadata lock.
ALTER TABLE users ADD CONSTRAINT users_email_canonical CHECK (
    email IS NFKC NORMALIZED
    AND email !~ '[[:cntrl:][:space:]\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2060-\u206F\u3164\uFE00-\uFE0F\uFEFF\uFFA0\uFFF0-\uFFF8]'
    AND split_part(email, '@', 2) ~ '^[\x21-\x7E]+$'
) NOT VALID;

DO $$
BEGIN
    ALTER TABLE users VALIDATE CONSTRAINT users_email_canonical;
EXCEPTION WHEN check_violation THEN
    RAISE NOTICE 'users_email_canonical left NOT VALID: some stored emails are not canonical yet; run poopypals users merge-duplicates';
END
$$;
