/* C tests of the velvet-rope ABI: every function, every error path, and a pthreads stress
 * test that checks counts are exact. Built and run under AddressSanitizer by `make test-c`. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "velvet_rope.h"

static int passed, failed;

#include "check.h"

static const char *CONFIG =
    "[[tickets.keys]]\n"
    "id = 1\n"
    "secret = \"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"\n"
    "[[rooms]]\n"
    "name = \"shop\"\n"
    "total_active_users = 3\n"
    "new_users_per_minute = 1000\n"
    "[rooms.cookie]\n"
    "secure = false\n"
    "[[resources]]\n"
    "identifier_glob = \"db-*\"\n"
    "capacity = 100\n"
    "algorithm = { kind = \"fair_share\", lease_length = 60, refresh_interval = 5 }\n";

static vr_engine *new_engine(const char *config) {
    vr_engine *e = NULL;
    vr_result r = vr_engine_new(config, strlen(config), T0, &e);
    CHECK(r == VR_OK && e != NULL);
    return e;
}

/* The `name=value` part of a Set-Cookie value, as a browser would send it back. */
static void cookie_of(const vr_decision *d, char *out, size_t len) {
    size_t n = strcspn(d->set_cookie, ";");
    if (n >= len) n = len - 1;
    memcpy(out, d->set_cookie, n);
    out[n] = 0;
}

static void test_misc(void) {
    CHECK(strcmp(vr_version(), "0.3.0") == 0);
    CHECK(strcmp(vr_result_name(VR_OK), "VR_OK") == 0);
    CHECK(strcmp(vr_result_name(VR_PANIC), "VR_PANIC") == 0);
    CHECK(strcmp(vr_result_name(999), "VR_UNKNOWN_RESULT") == 0);
    CHECK(vr_now_ms() > T0 / 2);
}

static void test_errors(void) {
    vr_engine *e = NULL;
    char msg[256];
    CHECK(vr_engine_new(NULL, 5, T0, &e) == VR_NULL_PARAMETER && e == NULL);
    CHECK(vr_last_error(msg, sizeof msg) > 0 && strstr(msg, "config") != NULL);
    CHECK(vr_engine_new(CONFIG, strlen(CONFIG), T0, NULL) == VR_NULL_PARAMETER);
    const char *bad = "[[rooms]]\nname = \"x\"\ntotal_active_users = 0\nnew_users_per_minute = 1\n";
    CHECK(vr_engine_new(bad, strlen(bad), T0, &e) == VR_INVALID_CONFIG && e == NULL);
    size_t need = vr_last_error(NULL, 0);
    CHECK(need > 0);
    vr_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "rooms[0].total_active_users") != NULL);
    /* Truncation keeps a NUL and returns the full length. */
    char tiny[8];
    CHECK(vr_last_error(tiny, sizeof tiny) == need && strlen(tiny) == 7);
    const char *junk = "this is [ not toml";
    CHECK(vr_engine_new(junk, strlen(junk), T0, &e) == VR_PARSE_ERROR);
    const char not_utf8[] = {'[', (char)0xff, ']'};
    CHECK(vr_engine_new(not_utf8, 3, T0, &e) == VR_INVALID_UTF8);
    CHECK(vr_engine_new_from_file("/nonexistent/velvet.toml", T0, &e) == VR_IO_ERROR);
    CHECK(vr_engine_new_from_file(NULL, T0, &e) == VR_NULL_PARAMETER);

    e = new_engine(CONFIG);
    vr_decision d;
    CHECK(vr_engine_admit(NULL, "shop", 4, NULL, 0, T0, &d) == VR_NULL_PARAMETER);
    CHECK(vr_engine_admit(e, "nope", 4, NULL, 0, T0, &d) == VR_UNKNOWN_ROOM);
    /* A room name is compared as bytes: one that is not UTF-8 is no room's. */
    CHECK(vr_engine_admit(e, not_utf8, 3, NULL, 0, T0, &d) == VR_UNKNOWN_ROOM);
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_engine_admit(e, NULL, 4, NULL, 0, T0, &d) == VR_NULL_PARAMETER);
    CHECK(vr_engine_tick(NULL, T0) == VR_NULL_PARAMETER);
    CHECK(vr_engine_reload(e, bad, strlen(bad)) == VR_INVALID_CONFIG);
    bool has = true;
    CHECK(vr_engine_has_room(e, "nope", 4, &has) == VR_OK && !has);
    CHECK(vr_engine_has_room(e, "shop", 4, &has) == VR_OK && has);
    vr_room_stats st;
    CHECK(vr_engine_stats(e, "nope", 4, &st) == VR_UNKNOWN_ROOM);
    size_t written = 0;
    CHECK(vr_engine_stats_json(e, NULL, 0, &written) == VR_BUFFER_TOO_SMALL && written > 10);
    char small[4];
    CHECK(vr_engine_stats_json(e, small, sizeof small, &written) == VR_BUFFER_TOO_SMALL);
    CHECK(vr_engine_stats_json(e, small, sizeof small, NULL) == VR_NULL_PARAMETER);
    vr_decision bogus = {0};
    bogus.outcome = 7;
    vr_page *p = NULL;
    CHECK(vr_engine_render_page(e, "shop", 4, &bogus, NULL, 0, &p) == VR_INVALID_ARGUMENT);
    CHECK(vr_page_get_view(NULL, NULL) == VR_NULL_PARAMETER);
    vr_engine_free(e);
    vr_engine_free(NULL);
    vr_page_free(NULL);
}

static void test_admission_flow(void) {
    vr_engine *e = new_engine(CONFIG);
    vr_decision d;
    char cookie[600];
    /* Three visitors fill the room. */
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.set_cookie_len > 84 && d.ticket_error == -1);
    CHECK(strncmp(d.set_cookie, "__vr_shop=", 10) == 0 && strlen(d.set_cookie) == d.set_cookie_len);
    cookie_of(&d, cookie, sizeof cookie);
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    /* The fourth waits, with a position and a page. */
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_QUEUE);
    CHECK(d.position == 1 && d.retry_after_secs == 20 && d.set_cookie_len > 0);
    vr_page *p = NULL;
    CHECK(vr_engine_render_page(e, "shop", 4, &d, "text/html", 9, &p) == VR_OK && p != NULL);
    vr_page_view v;
    CHECK(vr_page_get_view(p, &v) == VR_OK);
    CHECK(v.status == 200 && v.refresh_secs == 20 && v.body_len > 100);
    CHECK(memmem(v.body, v.body_len, "id=\"position\"", 13) != NULL);
    CHECK(v.content_type_len == strlen("text/html; charset=utf-8"));
    vr_page_free(p);
    p = NULL;
    CHECK(vr_engine_render_page(e, "shop", 4, &d, "application/json", 16, &p) == VR_OK && p);
    CHECK(vr_page_get_view(p, &v) == VR_OK && memmem(v.body, v.body_len, "\"position\":1", 12));
    vr_page_free(p);
    /* An admitted visitor comes back: admitted, nothing to re-issue this minute. */
    CHECK(vr_engine_admit(e, "shop", 4, cookie, strlen(cookie), T0 + 1, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.set_cookie_len == 0 && d.ticket_error == -1);
    /* Admit decisions have no page. */
    p = (vr_page *)1;
    CHECK(vr_engine_render_page(e, "shop", 4, &d, NULL, 0, &p) == VR_OK && p == NULL);
    /* A tampered cookie is no cookie: refused with a reason, the visitor queues as new. */
    char tampered[600];
    strcpy(tampered, cookie);
    tampered[40] = tampered[40] == 'A' ? 'B' : 'A';
    CHECK(vr_engine_admit(e, "shop", 4, tampered, strlen(tampered), T0 + 2, &d) == VR_OK);
    CHECK(d.ticket_error == 2 && d.outcome == VR_OUTCOME_QUEUE);
    /* A header that is not UTF-8 around the cookie is fine. */
    char weird[700];
    snprintf(weird, sizeof weird, "x=\xff\xfe; %s", cookie);
    CHECK(vr_engine_admit(e, "shop", 4, weird, strlen(weird), T0 + 3, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.ticket_error == -1);
    CHECK(vr_engine_tick(e, T0 + 1000) == VR_OK);
    vr_room_stats st;
    CHECK(vr_engine_stats(e, "shop", 4, &st) == VR_OK);
    CHECK(st.active_users == 3 && st.admitted_total == 3 && st.queue_length == 2);
    CHECK(st.ticket_rejections[2] == 1);
    char json[4096];
    size_t n = 0;
    CHECK(vr_engine_stats_json(e, json, sizeof json, &n) == VR_OK && n == strlen(json));
    CHECK(strstr(json, "\"shop\"") && strstr(json, "\"active_users\":3"));
    /* The metrics: asked with no buffer, the size needed; then the OpenMetrics text. */
    size_t need = 0;
    CHECK(vr_engine_metrics(e, NULL, 0, &need) == VR_BUFFER_TOO_SMALL && need > 100);
    char *metrics = malloc(need + 256);
    CHECK(metrics != NULL);
    CHECK(vr_engine_metrics(e, metrics, need + 256, &n) == VR_OK && n == strlen(metrics));
    CHECK(strstr(metrics, "velvet_rope_room_active_users{room=\"shop\"} 3\n") != NULL);
    CHECK(strstr(metrics, "velvet_rope_room_admissions_total{room=\"shop\",kind=\"new\"} 3\n"));
    CHECK(n > 6 && strcmp(metrics + n - 6, "# EOF\n") == 0);
    CHECK(vr_engine_metrics(e, metrics, 8, &n) == VR_BUFFER_TOO_SMALL && n > 100);
    CHECK(vr_engine_metrics(e, metrics, need, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_engine_metrics(NULL, metrics, need, &n) == VR_NULL_PARAMETER);
    free(metrics);
    /* Events for the host's log: the room queued (a waiter above), one JSON line each. */
    char line[512];
    size_t got = 0;
    uint8_t warning = 9;
    CHECK(vr_engine_next_event(e, line, 4, &got, &warning) == VR_BUFFER_TOO_SMALL && got > 4);
    CHECK(warning == 9);
    CHECK(vr_engine_next_event(e, line, sizeof line, &got, &warning) == VR_OK);
    CHECK(got == strlen(line) && strstr(line, "{\"event\":\"queueing_started\"") == line);
    CHECK(strstr(line, "\"room\":\"shop\"") != NULL && warning == 0);
    CHECK(vr_engine_next_event(e, line, sizeof line, &got, NULL) == VR_OK && got == 0 && line[0] == 0);
    CHECK(vr_engine_next_event(e, NULL, 0, &got, NULL) == VR_OK && got == 0);
    CHECK(vr_engine_next_event(e, line, sizeof line, NULL, NULL) == VR_NULL_PARAMETER);
    /* Reload to a bigger room keeps the counts. */
    char bigger[2048];
    snprintf(bigger, sizeof bigger, "%s", CONFIG);
    char *at = strstr(bigger, "total_active_users = 3");
    memcpy(at, "total_active_users = 4", 22);
    CHECK(vr_engine_reload(e, bigger, strlen(bigger)) == VR_OK);
    CHECK(vr_engine_tick(e, T0 + 2000) == VR_OK);
    CHECK(vr_engine_stats(e, "shop", 4, &st) == VR_OK && st.active_users == 3 && st.free_slots == 1);
    CHECK(vr_engine_next_event(e, line, sizeof line, &got, &warning) == VR_OK);
    CHECK(strstr(line, "{\"event\":\"config_reloaded\"") == line && warning == 0);
    vr_engine_free(e);
}

/* A holder decision (nginx subrequests): ticket holders are decided, anyone else is not, and
 * nothing is counted for them. */
static void test_holder_decision(void) {
    vr_engine *e = new_engine(CONFIG);
    vr_decision d;
    bool decided = true;
    char cookie[600];
    CHECK(vr_engine_admit_holder(e, "shop", 4, NULL, 0, T0, &decided, &d) == VR_OK && !decided);
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    cookie_of(&d, cookie, sizeof cookie);
    memset(&d, 0, sizeof d);
    CHECK(vr_engine_admit_holder(e, "shop", 4, cookie, strlen(cookie), T0 + 1, &decided, &d)
          == VR_OK && decided);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.set_cookie_len == 0 && d.ticket_error == -1);
    CHECK(vr_engine_admit_holder(e, "shop", 4, "x=1", 3, T0 + 1, &decided, &d) == VR_OK && !decided);
    CHECK(vr_engine_tick(e, T0 + 1000) == VR_OK);
    vr_room_stats st;
    CHECK(vr_engine_stats(e, "shop", 4, &st) == VR_OK);
    CHECK(st.active_users == 1 && st.admitted_total == 1 && st.queue_length == 0);
    /* Errors as for vr_engine_admit; both out-pointers are required. */
    CHECK(vr_engine_admit_holder(NULL, "shop", 4, NULL, 0, T0, &decided, &d) == VR_NULL_PARAMETER);
    CHECK(vr_engine_admit_holder(e, "nope", 4, NULL, 0, T0, &decided, &d) == VR_UNKNOWN_ROOM);
    CHECK(vr_engine_admit_holder(e, "shop", 4, NULL, 0, T0, NULL, &d) == VR_NULL_PARAMETER);
    CHECK(vr_engine_admit_holder(e, "shop", 4, NULL, 0, T0, &decided, NULL) == VR_NULL_PARAMETER);
    vr_engine_free(e);
}

/* Origin commands: `Velvet-Rope-Command: revoke` from the origin ends a visitor's session
 * (vr_engine_revoke_request), the response clears its cookie (vr_engine_clear_cookie), and
 * vr_is_revoke_command reads the header's value. A revocation frees exactly one seat. */
static void test_origin_commands(void) {
    static const char *config =
        "[[rooms]]\nname = \"gate\"\ntotal_active_users = 3\nnew_users_per_minute = 1000\n"
        "enabled_origin_commands = [\"revoke\"]\n[rooms.cookie]\nsecure = false\n"
        "[[rooms]]\nname = \"plain\"\ntotal_active_users = 3\nnew_users_per_minute = 1000\n"
        "[rooms.cookie]\nsecure = false\n";
    vr_engine *e = new_engine(config);
    vr_decision d;
    vr_room_stats st;
    uint32_t outcome = 99;
    char cookies[3][600];
    for (int i = 0; i < 3; i++) {
        CHECK(vr_engine_admit(e, "gate", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
        cookie_of(&d, cookies[i], sizeof cookies[i]);
    }
    CHECK(vr_engine_tick(e, T0 + 1) == VR_OK);
    CHECK(vr_engine_stats(e, "gate", 4, &st) == VR_OK && st.active_users == 3 && st.free_slots == 0);

    /* The first visitor's session ends, through its Cookie header (among other cookies). */
    char header[700];
    snprintf(header, sizeof header, "theme=dark; %s; lang=de", cookies[0]);
    CHECK(vr_engine_revoke_request(e, "gate", 4, header, strlen(header), NULL, 0, NULL, 0,
                                   T0 + 1, &outcome) == VR_OK && outcome == VR_REVOKED);
    outcome = 99;
    CHECK(vr_engine_revoke_request(e, "gate", 4, header, strlen(header), NULL, 0, NULL, 0,
                                   T0 + 2, &outcome) == VR_OK && outcome == VR_ALREADY_REVOKED);
    /* Exactly one seat: one new visitor is admitted, the next one waits. */
    CHECK(vr_engine_admit(e, "gate", 4, NULL, 0, T0 + 3, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    CHECK(vr_engine_admit(e, "gate", 4, NULL, 0, T0 + 3, &d) == VR_OK && d.outcome == VR_OUTCOME_QUEUE);
    char waiter[600];
    cookie_of(&d, waiter, sizeof waiter);
    /* The revoked ticket is refused (6: revoked): its holder arrives anew, and waits. */
    CHECK(vr_engine_admit(e, "gate", 4, cookies[0], strlen(cookies[0]), T0 + 4, &d) == VR_OK);
    CHECK(d.ticket_error == 6 && d.outcome == VR_OUTCOME_QUEUE);
    bool decided = true;
    CHECK(vr_engine_admit_holder(e, "gate", 4, cookies[0], strlen(cookies[0]), T0 + 4,
                                 &decided, &d) == VR_OK && !decided);
    /* The others still pass. */
    CHECK(vr_engine_admit(e, "gate", 4, cookies[1], strlen(cookies[1]), T0 + 5, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.ticket_error == -1);
    CHECK(vr_engine_tick(e, T0 + 1000) == VR_OK);
    CHECK(vr_engine_stats(e, "gate", 4, &st) == VR_OK && st.active_users == 3);
    /* The refusal is counted by its reason (6: revoked), as the JSON stats' `revoked`. */
    CHECK(st.ticket_rejections[6] == 1 && st.ticket_rejections[2] == 0);

    /* The ticket a decision issued (`issued`, the cookie's value) comes first. */
    const char *value = strchr(cookies[1], '=') + 1;
    CHECK(vr_engine_revoke_request(e, "gate", 4, "x=1", 3, NULL, 0, value, strlen(value),
                                   T0 + 1001, &outcome) == VR_OK && outcome == VR_REVOKED);
    /* Its seat goes to the first visitor waiting; a new one waits. */
    CHECK(vr_engine_admit(e, "gate", 4, NULL, 0, T0 + 1002, &d) == VR_OK && d.outcome == VR_OUTCOME_QUEUE);
    CHECK(vr_engine_admit(e, "gate", 4, waiter, strlen(waiter), T0 + 1002, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.ticket_error == -1);
    CHECK(vr_engine_admit(e, "gate", 4, cookies[1], strlen(cookies[1]), T0 + 1003, &d) == VR_OK);
    CHECK(d.ticket_error == 6 && d.outcome == VR_OUTCOME_QUEUE);
    /* A ticket header counts only in a room that takes header tickets (this one does not). */
    value = strchr(cookies[2], '=') + 1;
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, value, strlen(value), NULL, 0,
                                   T0 + 1003, &outcome) == VR_OK && outcome == VR_NO_SESSION);
    /* No ticket, an empty one, a forged one, a waiter's: no session; nothing changed. */
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, NULL, 0, NULL, 0, T0 + 1003, &outcome)
          == VR_OK && outcome == VR_NO_SESSION);
    CHECK(vr_engine_revoke_request(e, "gate", 4, "", 0, "", 0, "", 0, T0 + 1003, &outcome)
          == VR_OK && outcome == VR_NO_SESSION);
    CHECK(vr_engine_revoke_request(e, "gate", 4, "__vr_gate=AAAA", 14, NULL, 0, NULL, 0,
                                   T0 + 1003, &outcome) == VR_OK && outcome == VR_NO_SESSION);
    cookie_of(&d, header, sizeof header);
    CHECK(vr_engine_revoke_request(e, "gate", 4, header, strlen(header), NULL, 0, NULL, 0,
                                   T0 + 1003, &outcome) == VR_OK && outcome == VR_NO_SESSION);
    CHECK(vr_engine_admit(e, "gate", 4, cookies[2], strlen(cookies[2]), T0 + 1004, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.ticket_error == -1);

    /* A room without enabled_origin_commands refuses the command; the session goes on. */
    CHECK(vr_engine_admit(e, "plain", 5, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    cookie_of(&d, header, sizeof header);
    CHECK(vr_engine_revoke_request(e, "plain", 5, header, strlen(header), NULL, 0, NULL, 0,
                                   T0 + 1, &outcome) == VR_OK && outcome == VR_REVOKE_NOT_ENABLED);
    CHECK(vr_engine_admit(e, "plain", 5, header, strlen(header), T0 + 2, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.ticket_error == -1);

    /* Bad arguments are errors, and leave the outcome alone. */
    outcome = 99;
    CHECK(vr_engine_revoke_request(NULL, "gate", 4, NULL, 0, NULL, 0, NULL, 0, T0, &outcome)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, NULL, 4, NULL, 0, NULL, 0, NULL, 0, T0, &outcome)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, NULL, 0, NULL, 0, T0, NULL)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 3, NULL, 0, NULL, 0, T0, &outcome)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, NULL, 3, NULL, 0, T0, &outcome)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, NULL, 0, NULL, 3, T0, &outcome)
          == VR_NULL_PARAMETER);
    CHECK(vr_engine_revoke_request(e, "nope", 4, NULL, 0, NULL, 0, NULL, 0, T0, &outcome)
          == VR_UNKNOWN_ROOM);
    CHECK(vr_engine_revoke_request(e, "gate", 0, NULL, 0, NULL, 0, NULL, 0, T0, &outcome)
          == VR_UNKNOWN_ROOM);
    CHECK(vr_engine_revoke_request(e, "gate", 4, NULL, 0, NULL, 0, NULL, 0, UINT64_MAX, &outcome)
          == VR_INVALID_ARGUMENT);
    CHECK(outcome == 99);

    /* The header's value: `revoke` in any case, among comma-separated commands. */
    CHECK(vr_is_revoke_command("revoke", 6) == 1);
    CHECK(vr_is_revoke_command(" ReVoKe ", 8) == 1);
    CHECK(vr_is_revoke_command("other, REVOKE", 13) == 1);
    CHECK(vr_is_revoke_command("revoked", 6) == 1); /* the length bounds the value */
    CHECK(vr_is_revoke_command("revoked", 7) == 0);
    CHECK(vr_is_revoke_command("other", 5) == 0);
    CHECK(vr_is_revoke_command("revoke", 0) == 0);
    CHECK(vr_is_revoke_command(NULL, 0) == 0);
    CHECK(vr_is_revoke_command(NULL, 6) == 0);

    /* The Set-Cookie value clearing the room's cookie, NUL-terminated. */
    size_t need = 0, written = 0;
    CHECK(vr_engine_clear_cookie(e, "gate", 4, NULL, 0, &need) == VR_BUFFER_TOO_SMALL && need > 20);
    char small[8];
    CHECK(vr_engine_clear_cookie(e, "gate", 4, small, sizeof small, &written) == VR_BUFFER_TOO_SMALL);
    CHECK(written == need);
    char clear[256];
    CHECK(need <= sizeof clear);
    CHECK(vr_engine_clear_cookie(e, "gate", 4, clear, need - 1, &written) == VR_BUFFER_TOO_SMALL);
    CHECK(written == need);
    memset(clear, 'x', sizeof clear);
    CHECK(vr_engine_clear_cookie(e, "gate", 4, clear, need, &written) == VR_OK);
    CHECK(written == need - 1 && strlen(clear) == written);
    CHECK(strncmp(clear, "__vr_gate=; Max-Age=0", 21) == 0 && strstr(clear, "Path=/") != NULL);
    CHECK(strstr(clear, "Secure") == NULL); /* the room's cookie attributes */
    CHECK(vr_engine_clear_cookie(e, "plain", 5, clear, sizeof clear, &written) == VR_OK);
    CHECK(strncmp(clear, "__vr_plain=; Max-Age=0", 22) == 0);
    CHECK(vr_engine_clear_cookie(NULL, "gate", 4, clear, sizeof clear, &written) == VR_NULL_PARAMETER);
    CHECK(vr_engine_clear_cookie(e, NULL, 4, clear, sizeof clear, &written) == VR_NULL_PARAMETER);
    CHECK(vr_engine_clear_cookie(e, "gate", 4, clear, sizeof clear, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_engine_clear_cookie(e, "nope", 4, clear, sizeof clear, &written) == VR_UNKNOWN_ROOM);
    vr_engine_free(e);
}

static void test_from_file(void) {
    char path[] = "/tmp/velvet-rope-c-test-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(CONFIG, f);
    fclose(f);
    vr_engine *e = NULL;
    CHECK(vr_engine_new_from_file(path, T0, &e) == VR_OK && e != NULL);
    vr_decision d;
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    vr_engine_free(e);
    unlink(path);
}

/* The page in the visitor's language (a room with accept_language = true), and a template
 * that does not compile refused with its line and column. */
static void test_page_languages(void) {
    static const char *config =
        "[[rooms]]\n"
        "name = \"shop\"\n"
        "total_active_users = 1\n"
        "new_users_per_minute = 1000\n"
        "accept_language = true\n";
    vr_engine *e = new_engine(config);
    vr_decision d;
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_ADMIT);
    CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, T0, &d) == VR_OK && d.outcome == VR_OUTCOME_QUEUE);
    vr_page *p = NULL;
    vr_page_view v;
    CHECK(vr_engine_render_page_ex(e, "shop", 4, &d, "text/html", 9, "de", 2, T0, &p) == VR_OK && p);
    CHECK(vr_page_get_view(p, &v) == VR_OK);
    CHECK(memmem(v.body, v.body_len, "lang=\"de-DE\"", 12) != NULL);
    CHECK(memmem(v.body, v.body_len, "Sie sind in der Warteschlange", 29) != NULL);
    CHECK(memmem(v.body, v.body_len, "id=\"position\"", 13) != NULL);
    vr_page_free(p);
    p = NULL;
    /* No Accept-Language: the room's default_template_language (en-US). */
    CHECK(vr_engine_render_page_ex(e, "shop", 4, &d, NULL, 0, NULL, 0, T0, &p) == VR_OK && p);
    CHECK(vr_page_get_view(p, &v) == VR_OK);
    CHECK(memmem(v.body, v.body_len, "lang=\"en-US\"", 12) != NULL);
    vr_page_free(p);
    p = NULL;
    const char *hebrew = "he-IL,he;q=0.9";
    CHECK(vr_engine_render_page_ex(e, "shop", 4, &d, NULL, 0, hebrew, strlen(hebrew), T0, &p) ==
          VR_OK && p);
    CHECK(vr_page_get_view(p, &v) == VR_OK);
    CHECK(memmem(v.body, v.body_len, "dir=\"rtl\"", 9) != NULL);
    vr_page_free(p);
    p = NULL;
    CHECK(vr_engine_render_page_ex(e, "shop", 4, &d, NULL, 0, NULL, 3, T0, &p) == VR_NULL_PARAMETER);
    CHECK(vr_engine_render_page_ex(e, "shop", 4, &d, NULL, 0, "de", 2, T0, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_engine_render_page_ex(e, "nope", 4, &d, NULL, 0, "de", 2, T0, &p) == VR_UNKNOWN_ROOM);
    vr_engine_free(e);

    static const char *bad =
        "[[rooms]]\n"
        "name = \"shop\"\n"
        "total_active_users = 1\n"
        "new_users_per_minute = 1000\n"
        "custom_page = \"<p>\\n  {{#waitTimeKnown}}\"\n";
    e = NULL;
    CHECK(vr_engine_new(bad, strlen(bad), T0, &e) == VR_INVALID_CONFIG && e == NULL);
    char msg[512];
    vr_last_error(msg, sizeof msg);
    CHECK(strstr(msg, "rooms[0].custom_page") && strstr(msg, "line 2, column 3"));
}

static void test_shared_region(void) {
    size_t size = 0;
    CHECK(vr_shared_region_size(CONFIG, strlen(CONFIG), &size) == VR_OK && size > 0);
    uint8_t *region = aligned_alloc(128, (size + 127) / 128 * 128);
    memset(region, 0, size);
    vr_engine *a = NULL, *b = NULL;
    CHECK(vr_engine_new_shared(CONFIG, strlen(CONFIG), T0, region, size, &a) == VR_OK);
    CHECK(vr_engine_new_shared(CONFIG, strlen(CONFIG), T0, region, size, &b) == VR_OK);
    vr_decision d;
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(vr_engine_admit(i % 2 ? a : b, "shop", 4, NULL, 0, T0, &d) == VR_OK);
        admitted += d.outcome == VR_OUTCOME_ADMIT;
    }
    CHECK(admitted == 3);
    vr_engine *c = NULL;
    CHECK(vr_engine_new_shared(CONFIG, strlen(CONFIG), T0, region, size / 2, &c) == VR_REGION_REFUSED);
    CHECK(vr_engine_new_shared(CONFIG, strlen(CONFIG), T0, region + 8, size - 8, &c) == VR_REGION_REFUSED);
    CHECK(vr_engine_new_shared(CONFIG, strlen(CONFIG), T0, NULL, size, &c) == VR_NULL_PARAMETER);
    CHECK(c == NULL);
    vr_engine_free(a);
    vr_engine_free(b);
    free(region);
}

static void test_leases(void) {
    vr_coordinator *c = NULL;
    CHECK(vr_coordinator_new(CONFIG, strlen(CONFIG), T0, &c) == VR_OK && c);
    vr_lease l;
    /* Learning mode for one lease length after start: new clients get nothing yet. */
    CHECK(vr_coordinator_request(c, "a", 1, "db-1", 4, 10.0, 0, T0, &l) == VR_OK);
    CHECK(l.capacity == 0.0);
    uint64_t later = T0 + 61000;
    CHECK(vr_coordinator_request(c, "a", 1, "db-1", 4, 80.0, 0, later, &l) == VR_OK);
    CHECK(l.capacity == 80.0 && l.expires_at_ms > later && l.refresh_interval_secs == 5.0);
    CHECK(vr_coordinator_request(c, "b", 1, "db-1", 4, 80.0, 0, later, &l) == VR_OK);
    CHECK(l.capacity >= 0.0 && l.capacity <= 20.0);
    CHECK(vr_coordinator_request(c, "a", 1, "nothing", 7, 1.0, 0, later, &l) == VR_LEASE_ERROR);
    CHECK(vr_coordinator_request(c, "a", 1, "db-1", 4, -1.0, 0, later, &l) == VR_INVALID_ARGUMENT);
    /* Microseconds for milliseconds: past 2106, refused rather than a lease that never ends. */
    CHECK(vr_coordinator_request(c, "a", 1, "db-1", 4, 1.0, 0, T0 * 1000, &l) == VR_INVALID_ARGUMENT);
    bool released = false;
    CHECK(vr_coordinator_release(c, "a", 1, "db-1", 4, &released) == VR_OK && released);
    CHECK(vr_coordinator_release(c, "a", 1, "db-1", 4, &released) == VR_OK && !released);
    /* Its learning period, started and ended: events as an engine's, one line each. */
    char line[512];
    size_t written = 0;
    uint8_t warning = 9;
    CHECK(vr_coordinator_next_event(c, later, line, 4, &written, &warning) == VR_BUFFER_TOO_SMALL && written > 4);
    CHECK(vr_coordinator_next_event(c, later, line, sizeof line, &written, &warning) == VR_OK);
    CHECK(written == strlen(line) && strstr(line, "{\"event\":\"lease_learning_started\"") == line);
    CHECK(strstr(line, "\"source\":\"coordinator\"") != NULL && warning == 0);
    CHECK(vr_coordinator_next_event(c, later, line, sizeof line, &written, NULL) == VR_OK);
    CHECK(strstr(line, "{\"event\":\"lease_learning_ended\"") == line);
    CHECK(vr_coordinator_next_event(c, later, line, sizeof line, &written, NULL) == VR_OK && written == 0);
    CHECK(vr_coordinator_next_event(c, later, line, sizeof line, NULL, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_coordinator_next_event(NULL, later, line, sizeof line, &written, NULL) == VR_NULL_PARAMETER);
    vr_coordinator_free(c);

    vr_rate_limiter *rl = NULL;
    CHECK(vr_rate_limiter_new(-5.0, &rl) == VR_INVALID_ARGUMENT && rl == NULL);
    CHECK(vr_rate_limiter_new(1000.0, &rl) == VR_OK && rl);
    bool ok = false;
    int got = 0, errors = 0;
    for (int i = 0; i < 10000; i++) {
        errors += vr_rate_limiter_try_acquire(rl, 1, &ok) != VR_OK;
        got += ok;
    }
    CHECK(errors == 0);
    CHECK(got > 0 && got <= 1000);
    CHECK(vr_rate_limiter_set_rate(rl, 0.0) == VR_OK);
    CHECK(vr_rate_limiter_try_acquire(rl, 1, &ok) == VR_OK && !ok);
    vr_rate_limiter_free(rl);

    /* A NULL out-pointer is refused before anything is taken (issue 8: permits leaked). */
    vr_rate_limiter *one = NULL;
    CHECK(vr_rate_limiter_new(1.0, &one) == VR_OK);
    CHECK(vr_rate_limiter_try_acquire(one, 1, NULL) == VR_NULL_PARAMETER);
    CHECK(vr_rate_limiter_try_acquire(one, 1, &ok) == VR_OK && ok);
    vr_rate_limiter_free(one);

    vr_gauge *g = NULL;
    CHECK(vr_gauge_new(2, &g) == VR_OK);
    CHECK(vr_gauge_try_acquire(g, 2, NULL) == VR_NULL_PARAMETER);
    uint32_t held = 7;
    CHECK(vr_gauge_in_use(g, &held) == VR_OK && held == 0);
    CHECK(vr_gauge_try_acquire(g, 2, &ok) == VR_OK && ok);
    CHECK(vr_gauge_try_acquire(g, 1, &ok) == VR_OK && !ok);
    uint32_t in_use = 0;
    CHECK(vr_gauge_in_use(g, &in_use) == VR_OK && in_use == 2);
    CHECK(vr_gauge_release(g, 3) == VR_LEASE_ERROR);
    CHECK(vr_gauge_release(g, 2) == VR_OK);
    CHECK(vr_gauge_in_use(g, &in_use) == VR_OK && in_use == 0);
    vr_gauge_free(g);
}

/* Stress: threads hammer vr_engine_admit on one engine with new visitors while one thread
 * ticks; exactly the limit is admitted and the engine's exact counter agrees. */
#define STRESS_THREADS 4
#define STRESS_EACH 20000
#define STRESS_LIMIT 5000

struct stress {
    vr_engine *e;
    long admitted;
    int errors;
};

static void *hammer(void *arg) {
    struct stress *s = arg;
    vr_decision d;
    for (int i = 0; i < STRESS_EACH; i++) {
        if (vr_engine_admit(s->e, "big", 3, NULL, 0, T0 + 1 + i / 1000, &d) != VR_OK) {
            s->errors++;
        } else if (d.outcome == VR_OUTCOME_ADMIT) {
            s->admitted++;
        }
    }
    return NULL;
}

static volatile int stop_ticking;

static void *ticker(void *arg) {
    vr_engine *e = arg;
    uint64_t now = T0;
    while (!stop_ticking) {
        now += 7;
        vr_engine_tick(e, now < T0 + 20000 ? now : T0 + 20000);
    }
    return NULL;
}

static void test_stress(void) {
    const char *cfg =
        "[[rooms]]\nname = \"big\"\ntotal_active_users = 5000\nnew_users_per_minute = 1000000\n"
        "session_duration = 30\n";
    vr_engine *e = new_engine(cfg);
    pthread_t th[STRESS_THREADS], tk;
    struct stress s[STRESS_THREADS];
    stop_ticking = 0;
    pthread_create(&tk, NULL, ticker, e);
    for (int i = 0; i < STRESS_THREADS; i++) {
        s[i] = (struct stress){.e = e};
        pthread_create(&th[i], NULL, hammer, &s[i]);
    }
    long total = 0;
    int errors = 0;
    for (int i = 0; i < STRESS_THREADS; i++) {
        pthread_join(th[i], NULL);
        total += s[i].admitted;
        errors += s[i].errors;
    }
    stop_ticking = 1;
    pthread_join(tk, NULL);
    CHECK(errors == 0);
    CHECK(vr_engine_tick(e, T0 + 30000) == VR_OK);
    vr_room_stats st;
    CHECK(vr_engine_stats(e, "big", 3, &st) == VR_OK);
    CHECK((long)st.admitted_total == total);
    CHECK(total == STRESS_LIMIT);
    if (total != STRESS_LIMIT || (long)st.admitted_total != total)
        fprintf(stderr, "stress: admitted %ld, engine says %lu\n", total,
                (unsigned long)st.admitted_total);
    vr_engine_free(e);
}

/* Crowds during ticks, threads: 8 threads present new visitors at once while a ninth ticks
 * without pause. Every crowd admits exactly the limit (issue 8: 9 of 200 crowds went over, by
 * up to 4, and about 1 in 8 admitted fewer while slots were free). */
#define CROWD_THREADS 8
#define CROWD_EACH 10
#define CROWD_K 37

struct crowd_ticker {
    vr_engine *e;
    volatile int stop;
    volatile long ticks;
};

static void *crowd_tick(void *arg) {
    struct crowd_ticker *t = arg;
    uint64_t now = T0;
    while (!t->stop) {
        vr_engine_tick(t->e, ++now);
        __atomic_add_fetch(&t->ticks, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

struct crowd_member {
    vr_engine *e;
    struct crowd_ticker *ticker;
    pthread_barrier_t *go;
    int admitted, errors;
};

static void *crowd_join(void *arg) {
    struct crowd_member *m = arg;
    pthread_barrier_wait(m->go);
    while (__atomic_load_n(&m->ticker->ticks, __ATOMIC_RELAXED) == 0) {
    }
    vr_decision d;
    for (int i = 0; i < CROWD_EACH; i++) {
        if (vr_engine_admit(m->e, "r", 1, NULL, 0, T0 + 1, &d) != VR_OK)
            m->errors++;
        else
            m->admitted += d.outcome == VR_OUTCOME_ADMIT;
    }
    return NULL;
}

static void test_crowds_during_ticks(void) {
    const char *cfg = "[settings]\nshards = 256\n[[rooms]]\nname = \"r\"\n"
                      "total_active_users = 37\nnew_users_per_minute = 100000\n";
    int off = 0;
    for (int round = 0; round < 200; round++) {
        vr_engine *e = new_engine(cfg);
        struct crowd_ticker t = {.e = e};
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, CROWD_THREADS);
        pthread_t tk, th[CROWD_THREADS];
        struct crowd_member m[CROWD_THREADS];
        pthread_create(&tk, NULL, crowd_tick, &t);
        for (int i = 0; i < CROWD_THREADS; i++) {
            m[i] = (struct crowd_member){.e = e, .ticker = &t, .go = &go};
            pthread_create(&th[i], NULL, crowd_join, &m[i]);
        }
        int admitted = 0, errors = 0;
        for (int i = 0; i < CROWD_THREADS; i++) {
            pthread_join(th[i], NULL);
            admitted += m[i].admitted;
            errors += m[i].errors;
        }
        t.stop = 1;
        pthread_join(tk, NULL);
        pthread_barrier_destroy(&go);
        if (admitted != CROWD_K || errors != 0) {
            fprintf(stderr, "crowd %d: admitted %d of %d, %d errors\n", round, admitted,
                    CROWD_THREADS * CROWD_EACH, errors);
            off++;
        }
        vr_engine_free(e);
    }
    CHECK(off == 0);
}

/* Crowds during ticks, processes: as nginx does it, the engine is made over shared memory
 * before forking 3 workers; each worker ticks on a thread of its own while it presents 100
 * new visitors, all starting at one signal. Exactly the limit of 200, run after run (issue
 * 8: 2 of 50 runs admitted 202 and 201). */
#define PROC_WORKERS 3
#define PROC_EACH 100
#define PROC_LIMIT 200

struct proc_flags {
    int ready;
    int go;
};

static int proc_worker(vr_engine *e, struct proc_flags *flags) {
    struct crowd_ticker t = {.e = e};
    pthread_t tk;
    pthread_create(&tk, NULL, crowd_tick, &t);
    __atomic_add_fetch(&flags->ready, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&flags->go, __ATOMIC_SEQ_CST)) {
    }
    int admitted = 0;
    vr_decision d;
    for (int i = 0; i < PROC_EACH; i++) {
        if (vr_engine_admit(e, "r", 1, NULL, 0, T0 + 1, &d) == VR_OK)
            admitted += d.outcome == VR_OUTCOME_ADMIT;
        else
            admitted += 1000; /* an error shows in the total */
    }
    t.stop = 1;
    pthread_join(tk, NULL);
    return admitted;
}

static void test_crowds_in_processes(void) {
    const char *cfg = "[[rooms]]\nname = \"r\"\ntotal_active_users = 200\n"
                      "new_users_per_minute = 100000\n";
    size_t size = 0;
    CHECK(vr_shared_region_size(cfg, strlen(cfg), &size) == VR_OK);
    int off = 0;
    for (int run = 0; run < 50; run++) {
        uint8_t *region = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                               -1, 0);
        struct proc_flags *flags = mmap(NULL, sizeof *flags, PROT_READ | PROT_WRITE,
                                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        CHECK(region != MAP_FAILED && flags != MAP_FAILED);
        vr_engine *e = NULL;
        CHECK(vr_engine_new_shared(cfg, strlen(cfg), T0, region, size, &e) == VR_OK);
        int pipes[PROC_WORKERS][2];
        pid_t pids[PROC_WORKERS];
        for (int w = 0; w < PROC_WORKERS; w++) {
            CHECK(pipe(pipes[w]) == 0);
            pids[w] = fork();
            if (pids[w] == 0) {
                int n = proc_worker(e, flags);
                ssize_t wrote = write(pipes[w][1], &n, sizeof n);
                _exit(wrote == sizeof n ? 0 : 1);
            }
        }
        while (__atomic_load_n(&flags->ready, __ATOMIC_SEQ_CST) < PROC_WORKERS) {
        }
        __atomic_store_n(&flags->go, 1, __ATOMIC_SEQ_CST);
        int total = 0;
        for (int w = 0; w < PROC_WORKERS; w++) {
            int n = 0, status = 0;
            CHECK(read(pipes[w][0], &n, sizeof n) == sizeof n);
            waitpid(pids[w], &status, 0);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            close(pipes[w][0]);
            close(pipes[w][1]);
            total += n;
        }
        if (total != PROC_LIMIT) {
            fprintf(stderr, "processes, run %d: admitted %d\n", run, total);
            off++;
        }
        vr_engine_free(e);
        munmap(region, size);
        munmap(flags, sizeof *flags);
    }
    CHECK(off == 0);
}

/* A state file: two engines over it share counts; a new engine after both are gone (a
 * restart) keeps them, and its tickets. */
static void test_state_file(void) {
    char dir[] = "/tmp/velvet-rope-c-state-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/rooms.state", dir);
    vr_engine *a = NULL, *b = NULL;
    CHECK(vr_engine_open_state_file(CONFIG, strlen(CONFIG), path, T0, &a) == VR_OK);
    CHECK(vr_engine_open_state_file(CONFIG, strlen(CONFIG), path, T0, &b) == VR_OK);
    vr_decision d;
    char cookie[VR_SET_COOKIE_CAPACITY];
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        CHECK(vr_engine_admit(i % 2 ? a : b, "shop", 4, NULL, 0, T0, &d) == VR_OK);
        if (d.outcome == VR_OUTCOME_ADMIT) {
            admitted++;
            cookie_of(&d, cookie, sizeof cookie);
        }
    }
    CHECK(admitted == 3);
    vr_engine_free(a);
    vr_engine_free(b);
    vr_engine *c = NULL;
    CHECK(vr_engine_open_state_file(CONFIG, strlen(CONFIG), path, T0 + 1000, &c) == VR_OK);
    CHECK(vr_engine_admit(c, "shop", 4, cookie, strlen(cookie), T0 + 1000, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_ADMIT && d.set_cookie_len == 0 && d.ticket_error == -1);
    CHECK(vr_engine_admit(c, "shop", 4, NULL, 0, T0 + 1000, &d) == VR_OK);
    CHECK(d.outcome == VR_OUTCOME_QUEUE);
    CHECK(vr_engine_open_state_file(CONFIG, strlen(CONFIG), NULL, T0, &a) == VR_NULL_PARAMETER);
    CHECK(vr_engine_open_state_file(CONFIG, strlen(CONFIG), "/nonexistent/dir/x", T0, &a) ==
          VR_REGION_REFUSED);
    vr_engine_free(c);
    unlink(path);
    rmdir(dir);
}

/* The cluster tier's sync loop: a no-op without a [cluster] table; with one whose store does
 * not answer (nothing listens on port 1), it runs, fails, decides on regardless, and stops when
 * the engine is freed. (Real Redis: cluster/tests and the nginx cluster test.) */
static void test_cluster(void) {
    vr_cluster_status st;
    vr_engine *plain = new_engine(CONFIG);
    CHECK(vr_engine_cluster_start(plain) == VR_OK);
    CHECK(vr_engine_cluster_status(plain, &st) == VR_OK && st.running == 0);
    CHECK(vr_engine_cluster_start(NULL) == VR_NULL_PARAMETER);
    CHECK(vr_engine_cluster_status(plain, NULL) == VR_NULL_PARAMETER);
    vr_engine_free(plain);

    const char *clustered =
        "[settings]\n"
        "bucket_width_secs = 1\n"
        "[cluster]\n"
        "redis_url = \"redis://127.0.0.1:1\"\n"
        "host_id = \"c-test\"\n"
        "sync_interval_ms = 50\n"
        "lease_ms = 150\n"
        "timeout_ms = 50\n"
        "fallback_share = 0.5\n"
        "[[rooms]]\n"
        "name = \"shop\"\n"
        "total_active_users = 4\n"
        "new_users_per_minute = 1000\n"
        "session_duration = 1\n"
        "queueing_method = \"reject\"\n"; /* nobody waits ahead of the later visitors */
    vr_engine *e = NULL;
    CHECK(vr_engine_new(clustered, strlen(clustered), vr_now_ms(), &e) == VR_OK);
    CHECK(vr_engine_cluster_start(e) == VR_OK);
    CHECK(vr_engine_cluster_start(e) == VR_OK); /* already running: nothing more */
    for (int i = 0; i < 100; i++) {
        CHECK(vr_engine_cluster_status(e, &st) == VR_OK);
        if (st.failures > 0) break;
        usleep(10000);
    }
    CHECK(st.running == 1 && st.in_outage == 1 && st.outages == 1 && st.syncs == 0);
    /* No grant ever came: nobody new while the store may still hold a grant this host never
     * heard of (a lease and a session: 1.15 s here), then the fallback share (half of 4), and
     * no more. */
    vr_decision d;
    int admitted = 0;
    for (int i = 0; i < 5; i++) {
        vr_engine_tick(e, vr_now_ms());
        CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, vr_now_ms(), &d) == VR_OK);
        admitted += d.outcome == VR_OUTCOME_ADMIT;
    }
    CHECK(admitted == 0);
    usleep(1300000);
    for (int i = 0; i < 5; i++) {
        vr_engine_tick(e, vr_now_ms());
        CHECK(vr_engine_admit(e, "shop", 4, NULL, 0, vr_now_ms(), &d) == VR_OK);
        admitted += d.outcome == VR_OUTCOME_ADMIT;
    }
    CHECK(admitted == 2);
    vr_engine_free(e);

    const char *bad_url = "[cluster]\nredis_url = \"http://x\"\n[[rooms]]\nname = \"r\"\n"
                          "total_active_users = 1\nnew_users_per_minute = 1\n";
    CHECK(vr_engine_new(bad_url, strlen(bad_url), T0, &e) == VR_INVALID_CONFIG);
}

int main(void) {
    test_misc();
    test_errors();
    test_admission_flow();
    test_holder_decision();
    test_origin_commands();
    test_from_file();
    test_page_languages();
    test_shared_region();
    test_state_file();
    test_leases();
    test_cluster();
    test_stress();
    test_crowds_during_ticks();
    test_crowds_in_processes();
    printf("c-abi: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
