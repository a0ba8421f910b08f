/*
 * ngx_http_velvet_rope_module: a virtual waiting room in front of nginx locations.
 *
 * Directives:
 *   velvet_rope_config <path>;   http      the engine's configuration file (TOML or JSON)
 *   velvet_rope_state <path>;    http      optional: keep the counters in this state file
 *                                          (counts survive restarts and binary upgrades)
 *   velvet_rope <room> | off;    server, location
 *   velvet_rope_status;          location  the rooms' counters as JSON
 *
 * How the pieces fit:
 *   - At configuration time the file is read once and `vr_shared_region_size` says how much
 *     shared memory the engine's counters need; that much is requested as an nginx shared
 *     memory zone. A throw-away private engine (`vr_engine_new`) validates the file and the
 *     room names used by `velvet_rope`, so every mistake is reported by `nginx -t`.
 *   - The zone's init callback runs in the master before the workers are forked: it carves a
 *     128-byte aligned region out of the zone and creates the engine over it with
 *     `vr_engine_new_shared`. Every worker inherits that engine; the counters it touches live
 *     in the shared zone, so all workers share exact counts. On `nginx -s reload` nginx hands
 *     the same zone memory to the new cycle (same name and size) and the new engine attaches
 *     to the counters already there, so counts survive.
 *   - With `velvet_rope_state`, the master opens the state file instead (at configuration
 *     time, before the workers are forked: `vr_engine_open_state_file` maps it shared), so the
 *     workers inherit the mapping. A reload, a restart or a binary upgrade opens the same file
 *     and keeps every count and queue position; rooms are found in it by name.
 *   - Each worker drives `vr_engine_tick` from a 1 s timer.
 *   - With a `[cluster]` table in the configuration, each worker starts the cluster tier's
 *     sync loop (`vr_engine_cluster_start`, a thread): one worker of the zone syncs the rooms
 *     with Redis per interval, and the nginx instances sharing the store share the rooms'
 *     limits. Requests never touch Redis.
 *   - A precontent phase handler decides once per client request and room, and either lets
 *     it through or serves the waiting page. It runs after the access phase, so requests that
 *     allow/deny, auth_basic or auth_request refuse never take a seat (and `satisfy any`
 *     cannot skip it), and before try_files, mirror and the content handler.
 *     The ticket cookie is added by a header filter, so it is sent whatever response the
 *     request ends with (origin, error page, waiting page).
 *   - nginx routes: the location's `velvet_rope <room>` names the room, and the rooms'
 *     `routes` are not consulted. A room with `[[rooms.rules]]` or `ticket_header = true`
 *     reads the whole request (method, target, Host, every header, the client address as
 *     the realip module left it): it is decided by `vr_engine_decide_request_in`. Any other
 *     room only needs the Cookie header and keeps the `vr_engine_admit` path. A `bypass`
 *     rule passes the request untouched, a `reject` rule answers 403, a dry run or a
 *     `count_only` rule passes it with the ticket it would have had; in a `ticket_header`
 *     room a new ticket also goes out as the `Velvet-Rope-Ticket` response header.
 *   - Subrequests into a room (SSI `include virtual`, add_before_body, slice, a module's
 *     capture) are decided for the client request's visitor: its own decision for the room
 *     if it has one, else admitted if it holds an admission ticket of the room; anyone else
 *     gets an empty 403 (no protected content; SSI shows the include's `stub`). A
 *     subrequest never hands out a seat or a queue place (its ticket could not reach the
 *     visitor once the client response's header is out). auth_request and mirror
 *     subrequests, which the client never sees, are not decided (see
 *     ngx_http_velvet_rope_decide_subrequest).
 *   - The waiting room does not see requests answered in the rewrite phase (e.g. by
 *     `return`): put it in front of content (static files, proxy_pass, ...).
 *   - Origin commands: a response header `Velvet-Rope-Command` (from a proxied origin, or
 *     `add_header`) never reaches the client: the header filter takes it off every
 *     response. `revoke` ends the visitor's session in the rooms the client request was
 *     admitted to (and in its location's room) that accept it (`enabled_origin_commands`):
 *     its ticket is refused from then on by every worker, its seat freed at once, and the
 *     response clears the room's cookie instead of sending the module's own ticket. An
 *     `auth_request` check's command is followed with the client response (also in the
 *     room of the location the check protected); any other subrequest's is taken off and
 *     not followed: its headers are not about the client response.
 *     A command among the response's trailers (`add_trailer`, an upstream's) is taken off
 *     and followed by a body filter on the last buffer; the header is out by then, so the
 *     cookie stays (refused). An upstream response that nginx replaces before its header
 *     goes out (`X-Accel-Redirect`, `proxy_intercept_errors` with an `error_page`) has its
 *     command followed too, in the rooms that admitted the request until then, and the
 *     final response clears their cookies (see ngx_http_velvet_rope_dropped_command).
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <velvet_rope.h>


/* The engine's shared region must be aligned to this many bytes (C ABI contract). */
#define NGX_HTTP_VELVET_ROPE_REGION_ALIGN  128

/* How often each worker folds the shared counters into a fresh snapshot (C ABI contract:
 * "call ~every second from each worker"). */
#define NGX_HTTP_VELVET_ROPE_TICK_MSEC     1000

/* First guess for the size of the stats JSON; a larger buffer is taken when the engine asks. */
#define NGX_HTTP_VELVET_ROPE_STATS_GUESS   4096



/*
 * One `velvet_rope <room>` directive. Its location (and every location that inherits the room)
 * points at it, so that what postconfiguration learns about the room reaches them all.
 */
typedef struct {
    ngx_str_t           file;        /* nginx configuration file of the directive */
    ngx_uint_t          line;
    ngx_str_t           room;

    /*
     * The room reads more of a request than its Cookie header (it has rules, or takes
     * header tickets): vr_engine_room_reads_request, asked at postconfiguration. It holds
     * for the serving engine's whole life: that engine is made from the same configuration
     * text, and the module never reloads an engine in place. A reload (HUP, or a new
     * binary) reads the files into a new cycle with new directives, references and engine.
     */
    ngx_uint_t          reads;

    /* The origin may end the room's sessions (`enabled_origin_commands = ["revoke"]`),
     * asked at postconfiguration: every admission of a client request into the room is
     * remembered, so that a command in the response finds the room and the ticket the
     * decision issued whatever redirects came in between. */
    ngx_uint_t          revocable;
} ngx_http_velvet_rope_room_ref_t;


typedef struct {
    ngx_str_t           config_path;  /* absolute path of the engine configuration */
    ngx_str_t           config_text;  /* its contents, kept for the zone init (cycle pool) */
    ngx_str_t           state_path;   /* velvet_rope_state: absolute path, or data == NULL */
    size_t              region_size;  /* bytes the engine's shared region needs */
    ngx_shm_zone_t     *shm_zone;

    /* The engine serving requests: created by the zone init in the master, inherited by the
     * workers through fork. Freed with the cycle's pool. */
    vr_engine          *engine;

    /* A private engine used only while parsing the configuration to check room names. */
    vr_engine          *check_engine;

    ngx_array_t         room_refs;    /* ngx_http_velvet_rope_room_ref_t *, checked and
                                         filled in at postconfiguration */
    ngx_uint_t          status_used;  /* a velvet_rope_status directive was seen */
} ngx_http_velvet_rope_main_conf_t;


/* What the zone's init keeps in the zone itself, for the next cycle's init to find. */
typedef struct {
    u_char             *region;       /* 128-byte aligned start of the engine's region */
    size_t              len;          /* its length: the zone is reused while a config fits */
} ngx_http_velvet_rope_shctx_t;


typedef struct {
    /* Room name; empty means off; data == NULL means unset (inherit). The string is
     * NUL-free and lives in the configuration pool. */
    ngx_str_t           room;

    /* The directive naming the room (inherited with it); NULL when off. */
    ngx_http_velvet_rope_room_ref_t  *ref;

    /* velvet_rope_status is served here: unless this location names a room itself, it is
     * off (a monitoring scrape must not take a seat in a room inherited from the server). */
    ngx_flag_t          status;
} ngx_http_velvet_rope_loc_conf_t;


/*
 * A decision taken for a client request. nginx wipes r->ctx on internal redirects (`/` ->
 * `/index.html`, error_page, try_files), so the context is also registered as the data of a
 * request pool cleanup whose handler is a marker: it can always be found again there, and a
 * decision that counted something is never taken twice for one client request and room. (An
 * admission that counted nothing and sends no ticket is not remembered: taken again, it gives
 * the same answer; except in a room whose origin may revoke sessions, where the header
 * filter needs to know the request was admitted.) A request redirected into a location of
 * another room is decided for that room too; its decisions form a chain.
 */
typedef struct ngx_http_velvet_rope_ctx_s  ngx_http_velvet_rope_ctx_t;

struct ngx_http_velvet_rope_ctx_s {
    ngx_uint_t                   outcome;
    ngx_str_t                    room;         /* the location's, in the configuration pool */
    ngx_str_t                    set_cookie;   /* value still to send; len 0 when none */
    ngx_str_t                    ticket;       /* `Velvet-Rope-Ticket` to send with it (the
                                                  cookie's value, in a room that takes header
                                                  tickets); len 0 when none */
    ngx_str_t                    issued;       /* the ticket the decision issued (its cookie's
                                                  value, sent or not), for an origin's
                                                  `revoke`; len 0 when none */
    ngx_uint_t                   bypassed;     /* a `bypass` rule passed it untouched */
    ngx_http_velvet_rope_ctx_t  *prev;         /* the decision for an earlier room, or NULL */
};


/*
 * An `auth_request` check answered `Velvet-Rope-Command: revoke`: the client response
 * follows it (ngx_http_velvet_rope_origin_revokes). Kept as the data of a request pool
 * cleanup (redirects leave those alone), found by its handler.
 */
typedef struct {
    ngx_http_velvet_rope_loc_conf_t  *checked;  /* the location whose access the check was */
    ngx_uint_t                        pending;  /* not followed yet */
} ngx_http_velvet_rope_check_revoke_t;

/* The worker's pending checks' revocations (requests are a worker's alone): while there are
 * none, a response's header filter does not look for one. */
static ngx_uint_t  ngx_http_velvet_rope_check_revokes;


static ngx_int_t ngx_http_velvet_rope_decide_handler(ngx_http_request_t *r);
static ngx_int_t ngx_http_velvet_rope_decide_subrequest(ngx_http_request_t *r,
    ngx_http_velvet_rope_loc_conf_t *vlcf);
static ngx_int_t ngx_http_velvet_rope_refuse_subrequest(ngx_http_request_t *r);
static ngx_http_velvet_rope_ctx_t *ngx_http_velvet_rope_find_room(
    ngx_http_velvet_rope_ctx_t *ctx, ngx_str_t *room);
static ngx_http_velvet_rope_ctx_t *ngx_http_velvet_rope_remember(
    ngx_http_request_t *r, ngx_str_t *room, vr_decision *d,
    ngx_http_velvet_rope_ctx_t *prev, ngx_uint_t send_cookie);
static ngx_int_t ngx_http_velvet_rope_header_filter(ngx_http_request_t *r);
static ngx_int_t ngx_http_velvet_rope_body_filter(ngx_http_request_t *r,
    ngx_chain_t *in);
static ngx_uint_t ngx_http_velvet_rope_take_command(ngx_list_t *headers);
static ngx_int_t ngx_http_velvet_rope_dropped_command(ngx_http_request_t *r);
static ngx_int_t ngx_http_velvet_rope_remember_check_revoke(ngx_http_request_t *r);
static void ngx_http_velvet_rope_check_revoke_marker(void *data);
static ngx_int_t ngx_http_velvet_rope_origin_revokes(ngx_http_request_t *r,
    ngx_http_velvet_rope_ctx_t *latest, ngx_http_velvet_rope_loc_conf_t *vlcf,
    ngx_uint_t asked, ngx_uint_t checks);
static ngx_int_t ngx_http_velvet_rope_revoke_in(ngx_http_request_t *r,
    ngx_http_velvet_rope_main_conf_t *vmcf, ngx_str_t *room, ngx_str_t *cookie,
    ngx_table_elt_t *ticket, ngx_http_velvet_rope_ctx_t *ctx);
static const char *ngx_http_velvet_rope_revocation_name(uint32_t outcome);
static ngx_int_t ngx_http_velvet_rope_status_handler(ngx_http_request_t *r);
static void ngx_http_velvet_rope_drop_caching_headers(ngx_http_request_t *r);
static ngx_int_t ngx_http_velvet_rope_send_page(ngx_http_request_t *r,
    ngx_http_velvet_rope_main_conf_t *vmcf, ngx_str_t *room, vr_decision *d);
static ngx_http_velvet_rope_ctx_t *ngx_http_velvet_rope_get_ctx(
    ngx_http_request_t *r);
static void ngx_http_velvet_rope_ctx_marker(void *data);
static ngx_int_t ngx_http_velvet_rope_cookie_header(ngx_http_request_t *r,
    ngx_str_t *out);
static ngx_int_t ngx_http_velvet_rope_request(ngx_http_request_t *r, vr_request *req);
static void ngx_http_velvet_rope_ticket_of(ngx_str_t *set_cookie, ngx_str_t *ticket);
static ngx_table_elt_t *ngx_http_velvet_rope_accept_header(
    ngx_http_request_t *r);
static ngx_table_elt_t *ngx_http_velvet_rope_accept_language_header(
    ngx_http_request_t *r);
static ngx_table_elt_t *ngx_http_velvet_rope_find_header(ngx_http_request_t *r,
    const char *name, size_t len);
static ngx_int_t ngx_http_velvet_rope_send_uncached(ngx_http_request_t *r,
    u_char *body, size_t len);
static ngx_int_t ngx_http_velvet_rope_add_header(ngx_http_request_t *r,
    const char *key, ngx_str_t *value);
static ngx_int_t ngx_http_velvet_rope_add_number_header(ngx_http_request_t *r,
    const char *key, uint64_t n);
static uint64_t ngx_http_velvet_rope_now_ms(void);
static void ngx_http_velvet_rope_log_error(ngx_uint_t level, ngx_log_t *log,
    const char *what, vr_result rc);

static ngx_int_t ngx_http_velvet_rope_init_zone(ngx_shm_zone_t *shm_zone,
    void *data);
static ngx_shm_zone_t *ngx_http_velvet_rope_running_zone(ngx_str_t *name,
    ngx_shm_zone_t *except);
static void ngx_http_velvet_rope_cleanup_engines(void *data);
static ngx_int_t ngx_http_velvet_rope_init_process(ngx_cycle_t *cycle);
static void ngx_http_velvet_rope_tick(ngx_event_t *ev);
static void ngx_http_velvet_rope_log_events(vr_engine *engine, ngx_log_t *log);

static void *ngx_http_velvet_rope_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_velvet_rope_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_velvet_rope_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_velvet_rope_postconfiguration(ngx_conf_t *cf);
static char *ngx_http_velvet_rope_config(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_velvet_rope_state(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static ngx_int_t ngx_http_velvet_rope_add_counters(ngx_conf_t *cf,
    ngx_http_velvet_rope_main_conf_t *vmcf);
static char *ngx_http_velvet_rope(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_velvet_rope_status(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);


static ngx_command_t  ngx_http_velvet_rope_commands[] = {

    { ngx_string("velvet_rope_config"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_velvet_rope_config,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("velvet_rope_state"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_velvet_rope_state,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("velvet_rope"),
      NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_velvet_rope,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

    { ngx_string("velvet_rope_status"),
      NGX_HTTP_LOC_CONF|NGX_CONF_NOARGS,
      ngx_http_velvet_rope_status,
      NGX_HTTP_LOC_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_velvet_rope_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_velvet_rope_postconfiguration, /* postconfiguration */

    ngx_http_velvet_rope_create_main_conf, /* create main configuration */
    NULL,                                  /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_velvet_rope_create_loc_conf,  /* create location configuration */
    ngx_http_velvet_rope_merge_loc_conf    /* merge location configuration */
};


ngx_module_t  ngx_http_velvet_rope_module = {
    NGX_MODULE_V1,
    &ngx_http_velvet_rope_module_ctx,      /* module context */
    ngx_http_velvet_rope_commands,         /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    NULL,                                  /* init module */
    ngx_http_velvet_rope_init_process,     /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    NULL,                                  /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


static ngx_http_output_header_filter_pt  ngx_http_next_header_filter;
static ngx_http_output_body_filter_pt    ngx_http_next_body_filter;

/* One tick timer per worker process (init_process runs once per worker). */
static ngx_event_t  ngx_http_velvet_rope_tick_event;


/* ---------------------------------------------------------------------------------------- */
/* Request path                                                                             */
/* ---------------------------------------------------------------------------------------- */

static ngx_int_t
ngx_http_velvet_rope_decide_handler(ngx_http_request_t *r)
{
    vr_result                          rc;
    ngx_str_t                          cookie;
    vr_request                         req;
    vr_decision                        d;
    ngx_http_velvet_rope_ctx_t        *prev;
    ngx_http_velvet_rope_loc_conf_t   *vlcf;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    /* The previous pass's upstream answered with a response nginx replaced (X-Accel-Redirect,
     * an intercepted error's error_page): its command is followed before a content handler
     * here makes an upstream of its own. A first pass has no upstream: one comparison. */
    if (r->upstream != NULL && r->upstream->cleanup == NULL
        && ngx_http_velvet_rope_dropped_command(r) != NGX_OK)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    vlcf = ngx_http_get_module_loc_conf(r, ngx_http_velvet_rope_module);

    if (vlcf->room.len == 0) {
        return NGX_DECLINED;
    }

    /* Subrequests (SSI, add_before_body, auth_request, mirror...) are decided for the
     * client request's visitor, with what the client request knows. */
    if (r != r->main) {
        return ngx_http_velvet_rope_decide_subrequest(r, vlcf);
    }

    /* An internal redirect of a request decided already: keep that decision for its room. */
    prev = ngx_http_velvet_rope_get_ctx(r);

    if (prev != NULL) {
        if (prev->outcome != VR_OUTCOME_ADMIT) {
            /* Sent a waiting page and came back (error_page after the page failed to go
             * out): nothing the visitor asked for may be served. */
            return NGX_HTTP_SERVICE_UNAVAILABLE;
        }

        if (ngx_http_velvet_rope_find_room(prev, &vlcf->room) != NULL) {
            return NGX_DECLINED;
        }

        /* Admitted into another room only: this room decides too. */
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_velvet_rope_module);

    if (vmcf->engine == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "velvet_rope: no engine for room \"%V\"", &vlcf->room);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (vlcf->ref != NULL && vlcf->ref->reads) {
        /* Rules or header tickets: the room reads the whole request. */
        if (ngx_http_velvet_rope_request(r, &req) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = vr_engine_decide_request_in(vmcf->engine, (const char *) vlcf->room.data,
                                         vlcf->room.len, &req,
                                         ngx_http_velvet_rope_now_ms(), &d);

        if (rc != VR_OK) {
            ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                           "vr_engine_decide_request_in()", rc);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        ngx_log_debug5(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "velvet_rope: room \"%V\": outcome %uD, rule %D, bypassed %d, "
                       "would have %D", &vlcf->room, d.outcome, d.rule,
                       (int) d.bypassed, d.would_have);

    } else {
        /* The steady path: the Cookie header is all the room reads. */
        if (ngx_http_velvet_rope_cookie_header(r, &cookie) != NGX_OK) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        rc = vr_engine_admit(vmcf->engine, (const char *) vlcf->room.data,
                             vlcf->room.len, (const char *) cookie.data, cookie.len,
                             ngx_http_velvet_rope_now_ms(), &d);

        if (rc != VR_OK) {
            ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                           "vr_engine_admit()", rc);
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }
    }

    /* An admission with nothing to send (a visitor's valid ticket, already counted in this
     * bucket) changed no count: deciding it again after an internal redirect gives the same
     * answer, so nothing needs remembering. The common request stays allocation-free.
     * In a room that reads the whole request every pass is remembered (a bypass, a dry run's
     * or a `count_only` rule's pass, a ticket that came in a header): the client request's
     * subrequests into the room pass as it did (ngx_http_velvet_rope_decide_subrequest reads
     * only cookies), and an internal redirect does not count a rule's match twice. In a
     * room whose origin may revoke sessions every admission is remembered too: the header
     * filter then knows the room a command in the response is about, after any redirect. */
    if (d.outcome == VR_OUTCOME_ADMIT && d.set_cookie_len == 0 && !d.bypassed
        && !(vlcf->ref != NULL && (vlcf->ref->reads || vlcf->ref->revocable)))
    {
        return NGX_DECLINED;
    }

    if (ngx_http_velvet_rope_remember(r, &vlcf->room, &d, prev, 1) == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* Admitted, bypassed (untouched: no ticket), or passed by a dry run or a `count_only`
     * rule (with the ticket the visitor would have had, so that its place is kept). */
    if (d.outcome == VR_OUTCOME_ADMIT) {
        return NGX_DECLINED;
    }

    /* Queue or reject (a full room's 429, or a `reject` rule's 403): this request ends here
     * with the page. Finalizing it ourselves and returning NGX_DONE stops the phase engine,
     * as a content handler would. */
    ngx_http_finalize_request(r,
        ngx_http_velvet_rope_send_page(r, vmcf, &vlcf->room, &d));

    return NGX_DONE;
}


/*
 * A subrequest into a room, decided for the client request's visitor (the client request's
 * Cookie header, which subrequests share). The client request's response carries the
 * decisions: a subrequest never serves the waiting page, and it hands out no seat and no
 * place in the queue, since its ticket could not reach the visitor (an SSI include or an
 * add_before_body runs once the client response's header is out).
 *
 *   - auth_request's subrequests (header only) and mirror's (background) are never shown to
 *     the client: they are not decided, and the client request is decided in its own
 *     location's room, as if they were not there (a room inherited by an auth location must
 *     not turn a waiting visitor's page into a 403 or a 500).
 *   - The client request's own decision for the room stands (one decision per client request
 *     and room): admitted, the subrequest goes on; not admitted, it is refused. A client
 *     request that a `bypass` rule passed, or that a dry run or a `count_only` rule passed,
 *     was admitted in this sense: its subrequests into the room go on as it did (a rule
 *     about the visitor, such as a staff address or a monitor's header, holds for the parts
 *     of its page too).
 *   - Otherwise a visitor holding an admission ticket of the room goes on
 *     (vr_engine_admit_holder: counted once, renewed if due; the renewed ticket goes out with
 *     the client response if its header is not out yet). Anyone else is refused.
 *
 * The room's rules are not applied to the subrequest's own target: the C ABI decides a rule
 * only together with the admission (vr_engine_decide_request_in), which would count a seat or
 * a queue place for a ticket that cannot reach the visitor. So a subrequest that a `bypass`
 * rule would pass on its own (an include of /static/...) is held to the holder rule above:
 * it fails closed. Holders are found by their ticket cookie only (vr_engine_admit_holder
 * reads no `Velvet-Rope-Ticket` header).
 *
 * A refused subrequest gets an empty 403: no protected content, no error page inside the
 * including page, and SSI shows the include's `stub` block instead, if it has one.
 */
static ngx_int_t
ngx_http_velvet_rope_decide_subrequest(ngx_http_request_t *r,
    ngx_http_velvet_rope_loc_conf_t *vlcf)
{
    bool                               decided;
    vr_result                          rc;
    ngx_str_t                          cookie;
    vr_decision                        d;
    ngx_http_request_t                *mr;
    ngx_http_velvet_rope_ctx_t        *chain, *ctx;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (r->header_only || r->background) {
        return NGX_DECLINED;
    }

    mr = r->main;
    chain = ngx_http_velvet_rope_get_ctx(mr);

    ctx = ngx_http_velvet_rope_find_room(chain, &vlcf->room);

    if (ctx != NULL) {
        return ctx->outcome == VR_OUTCOME_ADMIT
               ? NGX_DECLINED : ngx_http_velvet_rope_refuse_subrequest(r);
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_velvet_rope_module);

    if (vmcf->engine == NULL) {
        ngx_log_error(NGX_LOG_ALERT, r->connection->log, 0,
                      "velvet_rope: no engine for room \"%V\"", &vlcf->room);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (ngx_http_velvet_rope_cookie_header(mr, &cookie) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    decided = false;
    rc = vr_engine_admit_holder(vmcf->engine, (const char *) vlcf->room.data,
                                vlcf->room.len, (const char *) cookie.data, cookie.len,
                                ngx_http_velvet_rope_now_ms(), &decided, &d);

    if (rc != VR_OK) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       "vr_engine_admit_holder()", rc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (!decided || d.outcome != VR_OUTCOME_ADMIT) {
        ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                       "velvet_rope: subrequest refused: not admitted to room \"%V\"",
                       &vlcf->room);
        return ngx_http_velvet_rope_refuse_subrequest(r);
    }

    if (d.set_cookie_len == 0) {
        /* A steady holder: nothing changed, nothing to remember. */
        return NGX_DECLINED;
    }

    /* Renewed: remembered for the client request, so that its other subrequests and its own
     * redirects into the room do not renew again. */
    if (ngx_http_velvet_rope_remember(mr, &vlcf->room, &d, chain, !mr->header_sent)
        == NULL)
    {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    return NGX_DECLINED;
}


/* An empty 403 for a subrequest (see ngx_http_velvet_rope_decide_subrequest). */
static ngx_int_t
ngx_http_velvet_rope_refuse_subrequest(ngx_http_request_t *r)
{
    ngx_int_t  rc;

    r->headers_out.status = NGX_HTTP_FORBIDDEN;
    r->headers_out.content_length_n = 0;

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK) {
        ngx_http_finalize_request(r, rc);
        return NGX_DONE;
    }

    ngx_http_finalize_request(r, ngx_http_send_special(r, NGX_HTTP_LAST));

    return NGX_DONE;
}


/* The decision for `room` in the chain starting at `ctx`, or NULL. */
static ngx_http_velvet_rope_ctx_t *
ngx_http_velvet_rope_find_room(ngx_http_velvet_rope_ctx_t *ctx, ngx_str_t *room)
{
    for ( /* void */ ; ctx; ctx = ctx->prev) {
        if (ctx->room.len == room->len
            && ngx_strncmp(ctx->room.data, room->data, room->len) == 0)
        {
            return ctx;
        }
    }

    return NULL;
}


/*
 * Remembers decision `d` for `room` on the client request `r`, after `prev`: a context kept
 * where internal redirects cannot lose it (see ngx_http_velvet_rope_ctx_t). Its ticket is
 * sent by the header filter when `send_cookie` is set. NULL on failure (logged).
 */
static ngx_http_velvet_rope_ctx_t *
ngx_http_velvet_rope_remember(ngx_http_request_t *r, ngx_str_t *room, vr_decision *d,
    ngx_http_velvet_rope_ctx_t *prev, ngx_uint_t send_cookie)
{
    ngx_str_t                    value;
    ngx_pool_cleanup_t          *cln;
    ngx_http_velvet_rope_ctx_t  *ctx;

    cln = ngx_pool_cleanup_add(r->pool, sizeof(ngx_http_velvet_rope_ctx_t));
    if (cln == NULL) {
        return NULL;
    }

    ctx = cln->data;
    ctx->outcome = d->outcome;
    ctx->room = *room;
    ctx->prev = prev;
    ctx->bypassed = d->bypassed;
    ngx_str_null(&ctx->set_cookie);
    ngx_str_null(&ctx->ticket);
    ngx_str_null(&ctx->issued);

    if (d->set_cookie_len > 0) {
        if (d->set_cookie_len > sizeof(d->set_cookie)) {
            ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
                          "velvet_rope: Set-Cookie length %uz out of bounds",
                          d->set_cookie_len);
            return NULL;
        }

        /* The decision lives on the caller's stack; the header filter needs the value
         * later (to send it, or to revoke the ticket in it). */
        value.data = ngx_pnalloc(r->pool, d->set_cookie_len);
        if (value.data == NULL) {
            return NULL;
        }

        ngx_memcpy(value.data, d->set_cookie, d->set_cookie_len);
        value.len = d->set_cookie_len;

        ngx_http_velvet_rope_ticket_of(&value, &ctx->issued);

        if (send_cookie) {
            ctx->set_cookie = value;

            if (d->ticket_header) {
                ctx->ticket = ctx->issued;
            }
        }
    }

    cln->handler = ngx_http_velvet_rope_ctx_marker;
    ngx_http_set_ctx(r, ctx, ngx_http_velvet_rope_module);

    return ctx;
}


static ngx_int_t
ngx_http_velvet_rope_send_page(ngx_http_request_t *r,
    ngx_http_velvet_rope_main_conf_t *vmcf, ngx_str_t *room, vr_decision *d)
{
    u_char            *body, *type;
    size_t             body_len;
    ngx_int_t          rc;
    vr_page           *page;
    vr_result          vrc;
    vr_page_view       view;
    ngx_table_elt_t   *accept, *language;

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    accept = ngx_http_velvet_rope_accept_header(r);
    language = ngx_http_velvet_rope_accept_language_header(r);

    page = NULL;
    vrc = vr_engine_render_page_ex(vmcf->engine, (const char *) room->data, room->len,
                                   d,
                                   accept ? (const char *) accept->value.data : NULL,
                                   accept ? accept->value.len : 0,
                                   language ? (const char *) language->value.data : NULL,
                                   language ? language->value.len : 0,
                                   ngx_http_velvet_rope_now_ms(), &page);

    if (vrc != VR_OK || page == NULL) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       "vr_engine_render_page_ex()", vrc);
        if (page != NULL) {
            vr_page_free(page);
        }
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    vrc = vr_page_get_view(page, &view);

    if (vrc != VR_OK) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       "vr_page_get_view()", vrc);
        vr_page_free(page);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* Copy what we need into the request pool and give the page back at once, so no engine
     * allocation outlives this function whatever happens to the request. */
    body_len = view.body_len;
    body = ngx_pnalloc(r->pool, body_len + view.content_type_len);

    if (body == NULL) {
        vr_page_free(page);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    type = ngx_cpymem(body, view.body, body_len);
    ngx_memcpy(type, view.content_type, view.content_type_len);

    r->headers_out.status = view.status;
    r->headers_out.content_length_n = body_len;
    r->headers_out.content_type.len = view.content_type_len;
    r->headers_out.content_type.data = type;
    r->headers_out.content_type_len = view.content_type_len;
    r->headers_out.content_type_lowcase = NULL;

    /* Queue pages carry `Refresh` (clients that ignore the HTML meta tag still come back on
     * time), reject pages `Retry-After`. */
    if ((view.refresh_secs > 0
         && ngx_http_velvet_rope_add_number_header(r, "Refresh", view.refresh_secs)
            != NGX_OK)
        || (view.retry_after_secs > 0
            && ngx_http_velvet_rope_add_number_header(r, "Retry-After",
                                                      view.retry_after_secs)
               != NGX_OK))
    {
        vr_page_free(page);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    vr_page_free(page);

    return ngx_http_velvet_rope_send_uncached(r, body, body_len);
}


/*
 * Runs after nginx's headers filter (config: ngx_module_order), so it sees the response as
 * `expires` and `add_header` left it. A waiting page or a status report is personal and
 * short-lived: whatever caching headers the location adds to its responses are taken off
 * again, leaving the page's own `Cache-Control: no-store`.
 */
static ngx_int_t
ngx_http_velvet_rope_header_filter(ngx_http_request_t *r)
{
    ngx_uint_t                        revoke, checks;
    ngx_http_velvet_rope_ctx_t       *ctx, *latest;
    ngx_http_velvet_rope_loc_conf_t  *vlcf;

    /* The origin's commands are for the module, never for the client. */
    revoke = ngx_http_velvet_rope_take_command(&r->headers_out.headers);

#if (NGX_HTTP_CACHE)
    if (revoke) {
        if (r->upstream) {
            /* A response carrying a command is about one visitor: never stored, or a cache
             * hit would replay it on the next visitor's session. */
            r->upstream->cacheable = 0;
        }

        if (r->cached) {
            ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                          "velvet_rope: \"Velvet-Rope-Command: revoke\" in a cached "
                          "response is ignored");
            revoke = 0;
        }
    }
#endif

    if (r != r->main) {
        /* An auth_request check: the client request waits for its answer before anything
         * of its own response goes out (not a mirror's, which runs in the background). The
         * check speaks for the origin about the client request: the client response
         * follows its command. (In nginx's own modules only auth_request makes such a
         * subrequest; another module's waited subrequest made before the client response's
         * header counts as a check of the location it was made from.) */
        if (r->waited && !r->background && !r->main->header_sent) {
            /* Also a command in the check's upstream response that nginx replaced (an
             * intercepted error's error_page, an X-Accel-Redirect in the auth location). */
            if (!revoke && r->upstream != NULL && r->upstream->cleanup == NULL
#if (NGX_HTTP_CACHE)
                && !r->cached
#endif
                && ngx_http_velvet_rope_take_command(&r->upstream->headers_in.headers))
            {
                revoke = 1;
            }

            if (revoke && ngx_http_velvet_rope_remember_check_revoke(r) != NGX_OK) {
                return NGX_ERROR;
            }

            return ngx_http_next_header_filter(r);
        }

        /* Any other subrequest's headers never reach the client (an include, a mirror):
         * its origin's command is not about the client response, and its cookie could not
         * be cleared. (Its pool is the client request's: the decisions found there are the
         * client request's, which its own header filter call handles.) */
        if (revoke) {
            ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                          "velvet_rope: \"Velvet-Rope-Command: revoke\" in a "
                          "subrequest's response is ignored");
        }

        return ngx_http_next_header_filter(r);
    }

    /* This response replaces one of the request's upstream, whose command it must follow
     * (an X-Accel-Redirect or an error page answered by `return` or by nginx itself). The
     * upstream's own response finds it still running: one comparison more. */
    if (r->upstream != NULL && r->upstream->cleanup == NULL
        && ngx_http_velvet_rope_dropped_command(r) != NGX_OK)
    {
        return NGX_ERROR;
    }

    latest = ngx_http_velvet_rope_get_ctx(r);
    vlcf = ngx_http_get_module_loc_conf(r, ngx_http_velvet_rope_module);

    /* A check's command: one comparison while no request of the worker has one. */
    checks = ngx_http_velvet_rope_check_revokes > 0;

    if ((revoke || checks)
        && ngx_http_velvet_rope_origin_revokes(r, latest, vlcf, revoke, checks)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    if ((latest != NULL && latest->outcome != VR_OUTCOME_ADMIT) || vlcf->status) {
        ngx_http_velvet_rope_drop_caching_headers(r);
    }

    for (ctx = latest; ctx; ctx = ctx->prev) {
        if (ctx->set_cookie.len == 0) {
            continue;
        }

        if (ngx_http_velvet_rope_add_header(r, "Set-Cookie", &ctx->set_cookie)
            != NGX_OK)
        {
            return NGX_ERROR;
        }

        /* A room taking header tickets hands the same ticket to clients that keep no
         * cookies (API clients): they send it back as a `Velvet-Rope-Ticket` header. */
        if (ctx->ticket.len > 0
            && ngx_http_velvet_rope_add_header(r, "Velvet-Rope-Ticket", &ctx->ticket)
               != NGX_OK)
        {
            return NGX_ERROR;
        }

        /* Sent once, even if a header filter ran again for this request. */
        ctx->set_cookie.len = 0;
        ctx->ticket.len = 0;
    }

    return ngx_http_next_header_filter(r);
}


/*
 * Trailers are final with the response's last buffer: `add_trailer` makes its values then
 * (its body filter runs before this one: config's ngx_module_order), and the upstream's
 * trailers (grpc_pass) are copied just before it. A `Velvet-Rope-Command` among them is
 * taken off as from the headers (the chunked and HTTP/2 filters skip it), and a `revoke`
 * followed as the header filter does; the header is out, so the cookie is not cleared (the
 * revoked ticket is refused from then on). A subrequest's trailers never reach the client.
 */
static ngx_int_t
ngx_http_velvet_rope_body_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    ngx_chain_t  *cl;

    /* Most responses have no trailers: one comparison. */
    if (r->headers_out.trailers.part.nelts == 0 || in == NULL || r != r->main) {
        return ngx_http_next_body_filter(r, in);
    }

    for (cl = in; cl; cl = cl->next) {
        if (cl->buf->last_buf) {
            break;
        }
    }

    if (cl != NULL
        && ngx_http_velvet_rope_take_command(&r->headers_out.trailers)
        && ngx_http_velvet_rope_origin_revokes(r, ngx_http_velvet_rope_get_ctx(r),
               ngx_http_get_module_loc_conf(r, ngx_http_velvet_rope_module), 1, 0)
           != NGX_OK)
    {
        return NGX_ERROR;
    }

    return ngx_http_next_body_filter(r, in);
}


/*
 * Takes every `Velvet-Rope-Command` line (any case) off a header list, as nginx deletes a
 * header line (hash 0: the header filters, the trailer writers and `$upstream_http_`
 * variables skip it). Whether one of them asks for `revoke`.
 */
static ngx_uint_t
ngx_http_velvet_rope_take_command(ngx_list_t *headers)
{
    ngx_uint_t        i, revoke;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    revoke = 0;

    for (part = &headers->part; part; part = part->next) {
        h = part->elts;

        for (i = 0; i < part->nelts; i++) {
            if (h[i].hash == 0
                || h[i].key.len != sizeof("Velvet-Rope-Command") - 1
                || ngx_strncasecmp(h[i].key.data, (u_char *) "Velvet-Rope-Command",
                                   sizeof("Velvet-Rope-Command") - 1)
                   != 0)
            {
                continue;
            }

            h[i].hash = 0;

            if (vr_is_revoke_command((const char *) h[i].value.data, h[i].value.len)) {
                revoke = 1;
            }
        }
    }

    return revoke;
}


/*
 * The client request's upstream answered with a response nginx replaced before its header
 * went out, so the header filter never saw it: an `X-Accel-Redirect` (the location it names
 * answers), or an error `proxy_intercept_errors` hands to an `error_page` (likewise a
 * response nginx refused as invalid). nginx finalized that upstream (u->cleanup is gone)
 * and copied none of its other headers. Called while it is still r->upstream: from the
 * next pass's precontent phase (before a content handler makes a new upstream), or from
 * the header filter (a `return`, an error page nginx makes itself). A `revoke` among its
 * headers (taken off them: followed once) ends the session in the rooms the request was
 * admitted to until then, and the final response clears their cookies. Not for a cache
 * hit (whose commands are not followed), nor once the header is out (post_action).
 */
static ngx_int_t
ngx_http_velvet_rope_dropped_command(ngx_http_request_t *r)
{
    if (r != r->main || r->header_sent) {
        return NGX_OK;
    }

#if (NGX_HTTP_CACHE)
    if (r->cached) {
        return NGX_OK;
    }
#endif

    if (!ngx_http_velvet_rope_take_command(&r->upstream->headers_in.headers)) {
        return NGX_OK;
    }

    ngx_log_debug0(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "velvet_rope: revoke in an upstream response nginx replaced");

    return ngx_http_velvet_rope_origin_revokes(r, ngx_http_velvet_rope_get_ctx(r), NULL,
                                               1, 0);
}


/*
 * Remembers, for the client request's header filter, that the auth check `r` (a subrequest)
 * answered `revoke`, with the location whose access it checked: the client request's
 * location now (the access phase).
 */
static ngx_int_t
ngx_http_velvet_rope_remember_check_revoke(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t                   *cln;
    ngx_http_velvet_rope_check_revoke_t  *check;

    cln = ngx_pool_cleanup_add(r->main->pool, sizeof(ngx_http_velvet_rope_check_revoke_t));
    if (cln == NULL) {
        return NGX_ERROR;
    }

    check = cln->data;
    check->checked = ngx_http_get_module_loc_conf(r->main, ngx_http_velvet_rope_module);
    check->pending = 1;
    cln->handler = ngx_http_velvet_rope_check_revoke_marker;
    ngx_http_velvet_rope_check_revokes++;

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "velvet_rope: revoke in the auth check \"%V\", followed with the client "
                   "response", &r->uri);

    return NGX_OK;
}


/* The request ends: a check's revocation it never followed (the client went away before
 * its response) is no longer pending. */
static void
ngx_http_velvet_rope_check_revoke_marker(void *data)
{
    ngx_http_velvet_rope_check_revoke_t  *check = data;

    if (check->pending) {
        check->pending = 0;
        ngx_http_velvet_rope_check_revokes--;
    }
}


/*
 * The origin answered the client request `Velvet-Rope-Command: revoke` (`asked`: in its
 * response; `checks`: maybe in an auth check's, see
 * ngx_http_velvet_rope_remember_check_revoke, followed here if this request had one):
 * ends the visitor's session in each room the request was admitted to (not one a `bypass`
 * rule passed it through), with the ticket its decision there issued, else the one it
 * brought (Cookie, or Velvet-Rope-Ticket in a room taking header tickets); and in its
 * location's room (`vlcf`, NULL for none) and in the room of each location an auth check
 * that answered `revoke` protected, where the request was not decided (a steady admission
 * in a room that does not remember it, a response nginx made before the room decided,
 * such as `return`, or a check's refusal).
 */
static ngx_int_t
ngx_http_velvet_rope_origin_revokes(ngx_http_request_t *r,
    ngx_http_velvet_rope_ctx_t *latest, ngx_http_velvet_rope_loc_conf_t *vlcf,
    ngx_uint_t asked, ngx_uint_t checks)
{
    ngx_str_t                             cookie;
    ngx_uint_t                            i, n, found;
    ngx_table_elt_t                      *ticket;
    ngx_pool_cleanup_t                   *cln;
    ngx_http_velvet_rope_ctx_t           *ctx;
    ngx_http_velvet_rope_main_conf_t     *vmcf;
    ngx_http_velvet_rope_check_revoke_t  *check;
    ngx_str_t                            *rooms[8];
    ngx_uint_t                            checked[8];

    /* The undecided rooms to revoke in, each once: the location's, then the checks'. (A
     * client request passes few auth checks: more than the array holds are followed in
     * the rooms it admitted to only, and logged.) */
    n = 0;
    found = 0;

    if (asked && vlcf != NULL && vlcf->room.len > 0) {
        checked[n] = 0;
        rooms[n++] = &vlcf->room;
    }

    for (cln = checks ? r->pool->cleanup : NULL; cln; cln = cln->next) {
        if (cln->handler != ngx_http_velvet_rope_check_revoke_marker) {
            continue;
        }

        check = cln->data;

        if (!check->pending) {
            continue;
        }

        check->pending = 0;
        ngx_http_velvet_rope_check_revokes--;
        found = 1;

        if (check->checked->room.len == 0) {
            continue;
        }

        for (i = 0; i < n; i++) {
            if (rooms[i]->len == check->checked->room.len
                && ngx_memcmp(rooms[i]->data, check->checked->room.data, rooms[i]->len)
                   == 0)
            {
                break;
            }
        }

        if (i < n) {
            checked[i] = 1;
            continue;
        }

        if (n == sizeof(rooms) / sizeof(rooms[0])) {
            ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                          "velvet_rope: room \"%V\": an auth check's revoke is not followed "
                          "there: too many auth checks' rooms in one request",
                          &check->checked->room);
            continue;
        }

        checked[n] = 1;
        rooms[n++] = &check->checked->room;
    }

    /* Some request of the worker has a check's command pending, not this one. */
    if (!asked && !found) {
        return NGX_OK;
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_velvet_rope_module);

    if (vmcf->engine == NULL) {
        return NGX_OK;
    }

    if (ngx_http_velvet_rope_cookie_header(r, &cookie) != NGX_OK) {
        return NGX_ERROR;
    }

    ticket = ngx_http_velvet_rope_find_header(r, "Velvet-Rope-Ticket",
                                              sizeof("Velvet-Rope-Ticket") - 1);

    for (ctx = latest; ctx; ctx = ctx->prev) {
        if (ctx->outcome != VR_OUTCOME_ADMIT || ctx->bypassed) {
            continue;
        }

        if (ngx_http_velvet_rope_revoke_in(r, vmcf, &ctx->room, &cookie, ticket, ctx)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    for (i = 0; i < n; i++) {
        ctx = ngx_http_velvet_rope_find_room(latest, rooms[i]);

        /* Decided there: revoked above when admitted; a bypass is left untouched. A check
         * answered before the room refused the request (a `reject` rule, a waiting page):
         * the ticket the request brought is revoked all the same. */
        if (ctx != NULL
            && (!checked[i] || ctx->outcome == VR_OUTCOME_ADMIT || ctx->bypassed))
        {
            continue;
        }

        if (ngx_http_velvet_rope_revoke_in(r, vmcf, rooms[i], &cookie, ticket, NULL)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/*
 * Revokes the session in `room`. When it ended (now or before), the response clears the
 * room's cookie: in place of the ticket `ctx` (the request's decision in the room, if any)
 * would have sent, whose Velvet-Rope-Ticket goes too; unless the header is out (a
 * trailer's command). Anything else is logged and the response goes out as it is; only a
 * failure to allocate is an error.
 */
static ngx_int_t
ngx_http_velvet_rope_revoke_in(ngx_http_request_t *r,
    ngx_http_velvet_rope_main_conf_t *vmcf, ngx_str_t *room, ngx_str_t *cookie,
    ngx_table_elt_t *ticket, ngx_http_velvet_rope_ctx_t *ctx)
{
    u_char     *p;
    size_t      written;
    uint32_t    outcome;
    ngx_str_t   clear;
    vr_result   rc;
    char        buf[512];

    p = NULL;
    outcome = VR_NO_SESSION;
    rc = vr_engine_revoke_request(vmcf->engine, (const char *) room->data, room->len,
                                  (const char *) cookie->data, cookie->len,
                                  ticket ? (const char *) ticket->value.data : NULL,
                                  ticket ? ticket->value.len : 0,
                                  ctx ? (const char *) ctx->issued.data : NULL,
                                  ctx ? ctx->issued.len : 0,
                                  ngx_http_velvet_rope_now_ms(), &outcome);

    if (rc != VR_OK) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       "vr_engine_revoke_request()", rc);
        return NGX_OK;
    }

    switch (outcome) {

    case VR_REVOKED:
    case VR_ALREADY_REVOKED:
        break;

    case VR_NO_SESSION:
        ngx_log_error(NGX_LOG_INFO, r->connection->log, 0,
                      "velvet_rope: room \"%V\": the origin revoked a session, but the "
                      "request holds no admission ticket of the room", room);
        return NGX_OK;

    case VR_REVOKE_NOT_ENABLED:
        ngx_log_error(NGX_LOG_NOTICE, r->connection->log, 0,
                      "velvet_rope: room \"%V\": the origin asked to revoke the session, "
                      "which the room does not accept (enabled_origin_commands): the "
                      "session goes on", room);
        return NGX_OK;

    default:
        ngx_log_error(NGX_LOG_WARN, r->connection->log, 0,
                      "velvet_rope: room \"%V\": the origin's revocation was refused (%s): "
                      "the session goes on", room,
                      ngx_http_velvet_rope_revocation_name(outcome));
        return NGX_OK;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "velvet_rope: room \"%V\": session ended by the origin (%s)", room,
                   ngx_http_velvet_rope_revocation_name(outcome));

    if (r->header_sent) {
        /* A trailer's command: the cookie went out with the header and stays, refused. */
        return NGX_OK;
    }

    /* The Set-Cookie value clearing the room's cookie (the engine says how long it is when
     * the stack buffer is too short). */
    written = 0;
    rc = vr_engine_clear_cookie(vmcf->engine, (const char *) room->data, room->len, buf,
                                sizeof(buf), &written);

    if (rc == VR_OK) {
        p = ngx_pnalloc(r->pool, written);
        if (p == NULL) {
            return NGX_ERROR;
        }

        ngx_memcpy(p, buf, written);

    } else if (rc == VR_BUFFER_TOO_SMALL && written > sizeof(buf)) {
        p = ngx_pnalloc(r->pool, written);
        if (p == NULL) {
            return NGX_ERROR;
        }

        rc = vr_engine_clear_cookie(vmcf->engine, (const char *) room->data, room->len,
                                    (char *) p, written, &written);
    }

    if (rc != VR_OK) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       "vr_engine_clear_cookie()", rc);
        return NGX_OK;
    }

    clear.data = p;
    clear.len = written;

    if (ctx != NULL) {
        /* Sent by the header filter's loop in place of the decision's ticket. */
        ctx->set_cookie = clear;
        ngx_str_null(&ctx->ticket);
        return NGX_OK;
    }

    return ngx_http_velvet_rope_add_header(r, "Set-Cookie", &clear);
}


static const char *
ngx_http_velvet_rope_revocation_name(uint32_t outcome)
{
    switch (outcome) {
    case VR_REVOKED:                     return "revoked";
    case VR_ALREADY_REVOKED:             return "already_revoked";
    case VR_NO_SESSION:                  return "no_session";
    case VR_REVOKE_NOT_ENABLED:          return "not_enabled";
    case VR_REVOKE_REFUSED_FULL:         return "refused_full: max_revocations kept";
    case VR_REVOKE_REFUSED_UNSENT:       return "refused_unsent: the cluster's store is "
                                                "behind";
    case VR_REVOKE_REFUSED_BUSY:         return "refused_busy";
    default:                             return "unknown";
    }
}


/* Takes off Expires and every Cache-Control nginx knows of (set by `expires` or
 * `add_header`); the module's own `no-store` is a plain header line and stays. */
static void
ngx_http_velvet_rope_drop_caching_headers(ngx_http_request_t *r)
{
#if (nginx_version >= 1023000)
    ngx_table_elt_t   *h;
#else
    ngx_uint_t         i;
    ngx_table_elt_t  **cc;
#endif

    if (r->headers_out.expires != NULL) {
        r->headers_out.expires->hash = 0;
        r->headers_out.expires = NULL;
    }

#if (nginx_version >= 1023000)

    for (h = r->headers_out.cache_control; h; h = h->next) {
        h->hash = 0;
    }

    r->headers_out.cache_control = NULL;

#else

    cc = r->headers_out.cache_control.elts;

    for (i = 0; i < r->headers_out.cache_control.nelts; i++) {
        cc[i]->hash = 0;
    }

    r->headers_out.cache_control.nelts = 0;

#endif
}


/*
 * Whether a status request asks for the metrics (Prometheus' scrape format) rather than the
 * JSON: `?format=prometheus` (or `openmetrics`), or an `Accept` that prefers
 * `application/openmetrics-text` or `text/plain` to `application/json` (what Prometheus
 * sends; see vr_wants_metrics). `?format=json` asks for the JSON whatever the `Accept`.
 */
static ngx_uint_t
ngx_http_velvet_rope_wants_metrics(ngx_http_request_t *r)
{
    ngx_str_t          format;
    ngx_table_elt_t   *accept;

    if (ngx_http_arg(r, (u_char *) "format", sizeof("format") - 1, &format) == NGX_OK) {
        return (format.len == sizeof("prometheus") - 1
                && ngx_strncasecmp(format.data, (u_char *) "prometheus", format.len) == 0)
               || (format.len == sizeof("openmetrics") - 1
                   && ngx_strncasecmp(format.data, (u_char *) "openmetrics", format.len)
                      == 0);
    }

    accept = ngx_http_velvet_rope_accept_header(r);

    return accept != NULL
           && vr_wants_metrics((const char *) accept->value.data, accept->value.len);
}


static ngx_int_t
ngx_http_velvet_rope_status_handler(ngx_http_request_t *r)
{
    size_t                             len, written;
    u_char                            *buf;
    ngx_int_t                          rc;
    ngx_uint_t                         metrics;
    vr_result                          vrc;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (!(r->method & (NGX_HTTP_GET|NGX_HTTP_HEAD))) {
        return NGX_HTTP_NOT_ALLOWED;
    }

    rc = ngx_http_discard_request_body(r);

    if (rc != NGX_OK) {
        return rc;
    }

    vmcf = ngx_http_get_module_main_conf(r, ngx_http_velvet_rope_module);

    if (vmcf->engine == NULL) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    metrics = ngx_http_velvet_rope_wants_metrics(r);
    len = NGX_HTTP_VELVET_ROPE_STATS_GUESS;

    for ( ;; ) {
        buf = ngx_pnalloc(r->pool, len);
        if (buf == NULL) {
            return NGX_HTTP_INTERNAL_SERVER_ERROR;
        }

        written = 0;
        vrc = metrics ? vr_engine_metrics(vmcf->engine, (char *) buf, len, &written)
                      : vr_engine_stats_json(vmcf->engine, (char *) buf, len, &written);

        if (vrc == VR_OK) {
            break;
        }

        /* The engine says how much it needs; take that (plus the NUL) once more. A second
         * refusal can only come from rooms or counts growing in between, so loop rather
         * than fail. */
        if (vrc == VR_BUFFER_TOO_SMALL && written >= len) {
            len = written + 64;
            continue;
        }

        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, r->connection->log,
                                       metrics ? "vr_engine_metrics()"
                                               : "vr_engine_stats_json()", vrc);
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    /* `written` excludes the NUL terminator the engine may have added. */
    if (written > 0 && buf[written - 1] == '\0') {
        written--;
    }

    r->headers_out.status = NGX_HTTP_OK;
    r->headers_out.content_length_n = written;
    if (metrics) {
        ngx_str_set(&r->headers_out.content_type,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8");
    } else {
        ngx_str_set(&r->headers_out.content_type, "application/json");
    }
    r->headers_out.content_type_len = r->headers_out.content_type.len;
    r->headers_out.content_type_lowcase = NULL;

    return ngx_http_velvet_rope_send_uncached(r, buf, written);
}


/*
 * Sends the response headers set so far plus `Cache-Control: no-store`, then `body` from
 * memory that lives in the request pool. Waiting pages and status reports are personal and
 * short-lived: no cache may keep them.
 */
static ngx_int_t
ngx_http_velvet_rope_send_uncached(ngx_http_request_t *r, u_char *body, size_t len)
{
    ngx_int_t     rc;
    ngx_buf_t    *b;
    ngx_str_t     value;
    ngx_chain_t   out;

    ngx_str_set(&value, "no-store");
    if (ngx_http_velvet_rope_add_header(r, "Cache-Control", &value) != NGX_OK) {
        return NGX_HTTP_INTERNAL_SERVER_ERROR;
    }

    if (len == 0) {
        r->header_only = 1;
    }

    rc = ngx_http_send_header(r);

    if (rc == NGX_ERROR || rc > NGX_OK || r->header_only) {
        return rc;
    }

    b = ngx_calloc_buf(r->pool);
    if (b == NULL) {
        return NGX_ERROR;
    }

    b->pos = body;
    b->last = body + len;
    b->memory = 1;
    b->last_buf = 1;
    b->last_in_chain = 1;

    out.buf = b;
    out.next = NULL;

    return ngx_http_output_filter(r, &out);
}


static ngx_http_velvet_rope_ctx_t *
ngx_http_velvet_rope_get_ctx(ngx_http_request_t *r)
{
    ngx_pool_cleanup_t          *cln;
    ngx_http_velvet_rope_ctx_t  *ctx;

    ctx = ngx_http_get_module_ctx(r, ngx_http_velvet_rope_module);

    if (ctx != NULL) {
        return ctx;
    }

    /* r->ctx was wiped by an internal redirect (or there is no decision): look for the
     * context in the request pool's cleanups, which redirects leave alone. */
    for (cln = r->pool->cleanup; cln; cln = cln->next) {
        if (cln->handler == ngx_http_velvet_rope_ctx_marker) {
            ctx = cln->data;
            ngx_http_set_ctx(r, ctx, ngx_http_velvet_rope_module);
            return ctx;
        }
    }

    return NULL;
}


static void
ngx_http_velvet_rope_ctx_marker(void *data)
{
    /* Nothing to release: the context lives in the request pool. The handler only marks the
     * cleanup entry that carries the context (see ngx_http_velvet_rope_get_ctx). */
}


/*
 * The Cookie request header as one string. Clients may send several Cookie headers (HTTP/2
 * sends one per cookie); the engine takes a single `a=b; c=d` list, so several are joined.
 */
static ngx_int_t
ngx_http_velvet_rope_cookie_header(ngx_http_request_t *r, ngx_str_t *out)
{
    size_t            len;
    u_char           *p;
    ngx_table_elt_t  *h;

#if (nginx_version >= 1023000)

    ngx_table_elt_t  *first;

    first = r->headers_in.cookie;

    if (first == NULL) {
        ngx_str_null(out);
        return NGX_OK;
    }

    if (first->next == NULL) {
        *out = first->value;
        return NGX_OK;
    }

    len = 0;
    for (h = first; h; h = h->next) {
        len += h->value.len + sizeof("; ") - 1;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    for (h = first; h; h = h->next) {
        if (p != out->data) {
            *p++ = ';'; *p++ = ' ';
        }
        p = ngx_cpymem(p, h->value.data, h->value.len);
    }

    out->len = p - out->data;

#else

    ngx_uint_t         i, n;
    ngx_table_elt_t  **hh;

    n = r->headers_in.cookies.nelts;
    hh = r->headers_in.cookies.elts;

    if (n == 0) {
        ngx_str_null(out);
        return NGX_OK;
    }

    if (n == 1) {
        *out = hh[0]->value;
        return NGX_OK;
    }

    len = 0;
    for (i = 0; i < n; i++) {
        len += hh[i]->value.len + sizeof("; ") - 1;
    }

    p = ngx_pnalloc(r->pool, len);
    if (p == NULL) {
        return NGX_ERROR;
    }

    out->data = p;

    for (i = 0; i < n; i++) {
        h = hh[i];
        if (i > 0) {
            *p++ = ';'; *p++ = ' ';
        }
        p = ngx_cpymem(p, h->value.data, h->value.len);
    }

    out->len = p - out->data;

#endif

    return NGX_OK;
}


/*
 * The client request as the engine's rules read it, its strings borrowed from the request
 * (they live as long as it does); only the header array is allocated, from the request pool.
 */
static ngx_int_t
ngx_http_velvet_rope_request(ngx_http_request_t *r, vr_request *req)
{
    u_char               *end;
    ngx_uint_t            i, n;
    vr_header            *hs;
    ngx_list_part_t      *part;
    ngx_table_elt_t      *h;
    struct sockaddr_in   *sin;
#if (NGX_HAVE_INET6)
    struct sockaddr_in6  *sin6;
#endif

    ngx_memzero(req, sizeof(vr_request));

    req->method = (const char *) r->method_name.data;
    req->method_len = r->method_name.len;

    /*
     * The request-target as received. nginx keeps the path of an absolute-form target
     * (`GET http://host/path`) as unparsed_uri and routes by the host in it; the engine is
     * handed the whole target, so that a rule on hosts reads that host as well as Host's.
     * The parts lie in one request line (HTTP/1.x; HTTP/2 and 3 have no absolute form).
     * Internal redirects change r->uri, never unparsed_uri: rules read what the client sent.
     */
    req->target = (const char *) r->unparsed_uri.data;
    req->target_len = r->unparsed_uri.len;

    end = r->unparsed_uri.data + r->unparsed_uri.len;

    if (r->http_version < NGX_HTTP_VERSION_20
        && r->schema_start != NULL && r->host_start != NULL && r->host_end != NULL
        && r->schema_start < r->host_start && r->host_end <= r->unparsed_uri.data)
    {
        req->target = (const char *) r->schema_start;
        req->target_len = end - r->schema_start;
    }

    if (r->headers_in.host != NULL) {
        req->host = (const char *) r->headers_in.host->value.data;
        req->host_len = r->headers_in.host->value.len;
    }

    /* An absolute-form target's host is the request's host to nginx (it chose the server by
     * it; $host is it), whatever the Host header says: the rules see that one. A target
     * without a path (`GET http://shop.example.com HTTP/1.1`) keeps no authority in
     * unparsed_uri, so it is taken here. */
    if (r->http_version < NGX_HTTP_VERSION_20
        && r->host_start != NULL && r->host_end != NULL && r->host_end > r->host_start)
    {
        req->host = (const char *) r->host_start;
        req->host_len = r->host_end - r->host_start;
    }

    /* Every header, in the order received (each Cookie header on its own). */
    n = 0;
    for (part = &r->headers_in.headers.part; part; part = part->next) {
        n += part->nelts;
    }

    if (n > 0) {
        hs = ngx_palloc(r->pool, n * sizeof(vr_header));
        if (hs == NULL) {
            return NGX_ERROR;
        }

        n = 0;
        for (part = &r->headers_in.headers.part; part; part = part->next) {
            h = part->elts;

            for (i = 0; i < part->nelts; i++) {
                hs[n].name = (const char *) h[i].key.data;
                hs[n].name_len = h[i].key.len;
                hs[n].value = (const char *) h[i].value.data;
                hs[n].value_len = h[i].value.len;
                n++;
            }
        }

        req->headers = hs;
        req->headers_len = n;
    }

    /* The client as nginx has it: the realip module (set_real_ip_from, real_ip_header) has
     * already replaced the connection's address with the one a trusted proxy vouches for. */
    switch (r->connection->sockaddr->sa_family) {

    case AF_INET:
        sin = (struct sockaddr_in *) r->connection->sockaddr;
        req->client_family = VR_CLIENT_IPV4;
        ngx_memcpy(req->client_addr, &sin->sin_addr.s_addr, 4);
        break;

#if (NGX_HAVE_INET6)
    case AF_INET6:
        sin6 = (struct sockaddr_in6 *) r->connection->sockaddr;

        /* An IPv4 client on a dual-stack socket is an IPv4 client, as nginx's allow/deny
         * take it: rules on IPv4 blocks must match it. */
        if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
            req->client_family = VR_CLIENT_IPV4;
            ngx_memcpy(req->client_addr, &sin6->sin6_addr.s6_addr[12], 4);

        } else {
            req->client_family = VR_CLIENT_IPV6;
            ngx_memcpy(req->client_addr, sin6->sin6_addr.s6_addr, 16);
        }

        break;
#endif

    default:
        /* A unix socket: no address a rule could name. */
        req->client_family = VR_CLIENT_UNKNOWN;
        break;
    }

    return NGX_OK;
}


/* The ticket in a Set-Cookie value: between the first `=` and the first `;` after it.
 * Empty when there is none (a cookie being cleared carries no ticket). */
static void
ngx_http_velvet_rope_ticket_of(ngx_str_t *set_cookie, ngx_str_t *ticket)
{
    u_char  *p, *last, *value;

    ngx_str_null(ticket);

    last = set_cookie->data + set_cookie->len;

    p = ngx_strlchr(set_cookie->data, last, '=');
    if (p == NULL) {
        return;
    }

    value = p + 1;

    p = ngx_strlchr(value, last, ';');
    if (p == NULL) {
        p = last;
    }

    ticket->data = value;
    ticket->len = p - value;
}


static ngx_table_elt_t *
ngx_http_velvet_rope_accept_header(ngx_http_request_t *r)
{
#if (NGX_HTTP_HEADERS)

    return r->headers_in.accept;

#else

    return ngx_http_velvet_rope_find_header(r, "Accept", sizeof("Accept") - 1);

#endif
}


static ngx_table_elt_t *
ngx_http_velvet_rope_accept_language_header(ngx_http_request_t *r)
{
#if (NGX_HTTP_HEADERS)

    return r->headers_in.accept_language;

#else

    return ngx_http_velvet_rope_find_header(r, "Accept-Language",
                                            sizeof("Accept-Language") - 1);

#endif
}


static ngx_table_elt_t *
ngx_http_velvet_rope_find_header(ngx_http_request_t *r, const char *name,
    size_t len)
{
    /* A request header nginx does not parse into a field of its own (Accept when built
     * without them, Velvet-Rope-Ticket): found in the list. Only the waiting page and an
     * origin's command need one, so the linear scan is off the admitted path. */
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_table_elt_t  *h;

    part = &r->headers_in.headers.part;
    h = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            h = part->elts;
            i = 0;
        }

        if (h[i].key.len == len
            && ngx_strncasecmp(h[i].key.data, (u_char *) name, len) == 0)
        {
            return &h[i];
        }
    }
}


static ngx_int_t
ngx_http_velvet_rope_add_header(ngx_http_request_t *r, const char *key,
    ngx_str_t *value)
{
    ngx_table_elt_t  *h;

    h = ngx_list_push(&r->headers_out.headers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    h->hash = 1;
    h->key.len = ngx_strlen(key);
    h->key.data = (u_char *) key;
    h->value = *value;
    h->lowcase_key = NULL;
#if (nginx_version >= 1023000)
    h->next = NULL;
#endif

    return NGX_OK;
}


static ngx_int_t
ngx_http_velvet_rope_add_number_header(ngx_http_request_t *r, const char *key,
    uint64_t n)
{
    ngx_str_t  value;

    value.data = ngx_pnalloc(r->pool, NGX_INT64_LEN);
    if (value.data == NULL) {
        return NGX_ERROR;
    }

    value.len = ngx_sprintf(value.data, "%uL", n) - value.data;

    return ngx_http_velvet_rope_add_header(r, key, &value);
}


/* Wall-clock milliseconds since the Unix epoch (tickets carry wall-clock time), from nginx's
 * cached time: no system call on the request path. */
static uint64_t
ngx_http_velvet_rope_now_ms(void)
{
    ngx_time_t  *tp;

    tp = ngx_timeofday();

    return (uint64_t) tp->sec * 1000 + tp->msec;
}


static void
ngx_http_velvet_rope_log_error(ngx_uint_t level, ngx_log_t *log, const char *what,
    vr_result rc)
{
    size_t  n;
    char    msg[512];

    n = vr_last_error(msg, sizeof(msg));
    if (n == 0) {
        msg[0] = '\0';
    }

    ngx_log_error(level, log, 0, "velvet_rope: %s failed: %s: %s",
                  what, vr_result_name(rc), msg);
}


/* ---------------------------------------------------------------------------------------- */
/* Shared memory, engine life cycle, tick timer                                             */
/* ---------------------------------------------------------------------------------------- */

static ngx_int_t
ngx_http_velvet_rope_init_zone(ngx_shm_zone_t *shm_zone, void *data)
{
    u_char                            *raw;
    vr_result                          rc;
    ngx_slab_pool_t                   *shpool;
    ngx_http_velvet_rope_shctx_t      *ctx;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    vmcf = shm_zone->data;
    shpool = (ngx_slab_pool_t *) shm_zone->shm.addr;

    if (data != NULL) {
        /*
         * Reload: nginx kept the previous cycle's zone (same name and size: the module asks
         * for the running zone's size whenever the new configuration fits in it). The region
         * is where the previous init put it; the new engine attaches to it, finds each room by
         * name (rooms may be reordered, removed or made smaller) and keeps every count, or
         * refuses a room whose counters cannot serve its new configuration.
         */
        ctx = shpool->data;

    } else {
        /*
         * A fresh zone. On a reload that still has the previous cycle's zone under this name
         * (nginx did not reuse it because the new configuration needs more memory), starting
         * from zero counts while visitors hold seats would admit a second roomful. Refused,
         * as when the zone is reused but a room cannot be served (below): the running
         * configuration keeps serving.
         */
        if (ngx_http_velvet_rope_running_zone(&shm_zone->shm.name, shm_zone) != NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "velvet_rope: the new configuration changes the layout of the "
                          "shared counters (a room added, or one that needs more memory); "
                          "restart nginx to apply it with fresh counts");
            return NGX_ERROR;
        }

        /* Anonymous shared memory mapped by the master before the fork, so it is at the
         * same address in every worker. ngx_slab_calloc hands out zeroed memory, which the
         * engine takes as a fresh region. */
        ctx = ngx_slab_calloc(shpool, sizeof(ngx_http_velvet_rope_shctx_t));
        raw = ngx_slab_calloc(shpool,
                              vmcf->region_size + NGX_HTTP_VELVET_ROPE_REGION_ALIGN);
        if (ctx == NULL || raw == NULL) {
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "velvet_rope: zone \"%V\" too small for %uz bytes",
                          &shm_zone->shm.name, vmcf->region_size);
            return NGX_ERROR;
        }

        ctx->region = ngx_align_ptr(raw, NGX_HTTP_VELVET_ROPE_REGION_ALIGN);
        ctx->len = vmcf->region_size;
        shpool->data = ctx;
    }

    rc = vr_engine_new_shared((const char *) vmcf->config_text.data,
                              vmcf->config_text.len, vr_now_ms(),
                              ctx->region, ctx->len, &vmcf->engine);

    if (rc == VR_OK) {
        ngx_log_error(NGX_LOG_NOTICE, shm_zone->shm.log, 0,
                      "velvet_rope: %s counters in zone \"%V\" (%uz bytes)",
                      data != NULL ? "kept the" : "new", &shm_zone->shm.name, ctx->len);
    } else {
        vmcf->engine = NULL;
        ngx_http_velvet_rope_log_error(NGX_LOG_EMERG, shm_zone->shm.log,
                                       "vr_engine_new_shared()", rc);

        if (data != NULL && rc == VR_REGION_REFUSED) {
            /* Same zone, but a room's counters cannot serve the new configuration (the
             * line above names the room and the setting). The running workers still use
             * them, so they cannot be wiped under them. */
            ngx_log_error(NGX_LOG_EMERG, shm_zone->shm.log, 0,
                          "velvet_rope: the new configuration changes the layout of the "
                          "shared counters (see the line above); restart nginx to apply it "
                          "with fresh counts");
        }

        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * The running cycle's zone of this module named `name` (the cycle a reload replaces; on a
 * first start or `nginx -t`, the empty bootstrap cycle), other than `except`. During the new
 * cycle's configuration and zone initialisation the global ngx_cycle is still the running one.
 */
static ngx_shm_zone_t *
ngx_http_velvet_rope_running_zone(ngx_str_t *name, ngx_shm_zone_t *except)
{
    ngx_uint_t        i;
    ngx_list_part_t  *part;
    ngx_shm_zone_t   *zone;

    part = &((ngx_cycle_t *) ngx_cycle)->shared_memory.part;
    zone = part->elts;

    for (i = 0; /* void */; i++) {

        if (i >= part->nelts) {
            if (part->next == NULL) {
                return NULL;
            }

            part = part->next;
            zone = part->elts;
            i = 0;
        }

        if (zone == NULL) {
            return NULL;
        }

        if (&zone[i] != except
            && zone[i].tag == &ngx_http_velvet_rope_module
            && zone[i].shm.name.len == name->len
            && ngx_strncmp(zone[i].shm.name.data, name->data, name->len) == 0)
        {
            return &zone[i];
        }
    }
}


/*
 * Cleanup of the cycle pool: frees the engines of this configuration. It runs in the master
 * when the configuration is replaced (reload) or nginx exits, and in each worker when it
 * exits; the shared counters stay in the zone, which nginx owns.
 */
static void
ngx_http_velvet_rope_cleanup_engines(void *data)
{
    ngx_http_velvet_rope_main_conf_t  *vmcf = data;

    if (vmcf->engine != NULL) {
        vr_engine_free(vmcf->engine);
        vmcf->engine = NULL;
    }

    if (vmcf->check_engine != NULL) {
        vr_engine_free(vmcf->check_engine);
        vmcf->check_engine = NULL;
    }
}


static ngx_int_t
ngx_http_velvet_rope_init_process(ngx_cycle_t *cycle)
{
    vr_result                          rc;
    ngx_event_t                       *ev;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (ngx_process != NGX_PROCESS_WORKER && ngx_process != NGX_PROCESS_SINGLE) {
        return NGX_OK;
    }

    vmcf = ngx_http_cycle_get_module_main_conf(cycle, ngx_http_velvet_rope_module);

    if (vmcf == NULL || vmcf->engine == NULL) {
        return NGX_OK;
    }

    ev = &ngx_http_velvet_rope_tick_event;
    ngx_memzero(ev, sizeof(ngx_event_t));

    ev->handler = ngx_http_velvet_rope_tick;
    ev->data = vmcf;
    ev->log = cycle->log;

    /* A pending tick must not hold up a graceful shutdown (QUIT, reload). */
    ev->cancelable = 1;

    /* The engine's snapshot was built when the master created it, possibly long before this
     * worker started (a respawn): bring it up to date before the first request. */
    ngx_http_velvet_rope_tick(ev);

    /* With a [cluster] table, this worker runs a sync loop (a thread; one worker of the zone
     * syncs per interval, the others take over when it stops). Requests never wait for it. */
    rc = vr_engine_cluster_start(vmcf->engine);

    if (rc != VR_OK) {
        ngx_http_velvet_rope_log_error(NGX_LOG_ERR, cycle->log, "vr_engine_cluster_start()", rc);
    }

    return NGX_OK;
}



/*
 * Writes the engine's events (a room's queue starting or stopping, a scheduled event's
 * phases, the cluster store lost or found; an nginx reload builds a new engine and logs no
 * event of its own) to the error log, one JSON line each:
 * at notice level, or warn for a refusal or an outage. Each room change is found once for the
 * host, by whichever worker's tick saw it. At most 64 a tick: the rest wait for the next one.
 */
static void
ngx_http_velvet_rope_log_events(vr_engine *engine, ngx_log_t *log)
{
    u_char      line[1024], *big;
    size_t      written;
    uint8_t     warning;
    vr_result   rc;
    ngx_uint_t  i, level;

    for (i = 0; i < 64; i++) {
        written = 0;
        warning = 0;
        rc = vr_engine_next_event(engine, (char *) line, sizeof(line), &written, &warning);

        if (rc == VR_BUFFER_TOO_SMALL) {
            /* A long line (a refused configuration's error): a buffer of its size, once. */
            big = ngx_alloc(written, log);
            if (big == NULL) {
                return;
            }

            rc = vr_engine_next_event(engine, (char *) big, written, &written, &warning);

            if (rc == VR_OK && written > 0) {
                level = warning ? NGX_LOG_WARN : NGX_LOG_NOTICE;
                ngx_log_error(level, log, 0, "velvet_rope: event %s", big);
            }

            ngx_free(big);

            if (rc != VR_OK) {
                return;
            }

            continue;
        }

        if (rc != VR_OK || written == 0) {
            return;
        }

        level = warning ? NGX_LOG_WARN : NGX_LOG_NOTICE;
        ngx_log_error(level, log, 0, "velvet_rope: event %s", line);
    }
}

static void
ngx_http_velvet_rope_tick(ngx_event_t *ev)
{
    vr_result                          rc;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (ngx_exiting || ngx_quit || ngx_terminate) {
        return;
    }

    /* The running cycle's engine, looked up each time: with `master_process off` a reload
     * replaces the cycle (and frees the old engine) without running init_process again. */
    vmcf = ngx_http_cycle_get_module_main_conf(ngx_cycle, ngx_http_velvet_rope_module);

    if (vmcf != NULL && vmcf->engine != NULL) {
        rc = vr_engine_tick(vmcf->engine, ngx_http_velvet_rope_now_ms());

        if (rc != VR_OK) {
            ngx_http_velvet_rope_log_error(NGX_LOG_ERR, ngx_cycle->log, "vr_engine_tick()",
                                           rc);
        }

        ngx_http_velvet_rope_log_events(vmcf->engine, ngx_cycle->log);
    }

    ngx_add_timer(ev, NGX_HTTP_VELVET_ROPE_TICK_MSEC);
}


/* ---------------------------------------------------------------------------------------- */
/* Configuration                                                                            */
/* ---------------------------------------------------------------------------------------- */

static void *
ngx_http_velvet_rope_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    vmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_velvet_rope_main_conf_t));
    if (vmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     vmcf->config_path = { 0, NULL };
     *     vmcf->config_text = { 0, NULL };
     *     vmcf->state_path = { 0, NULL };
     *     vmcf->shm_zone = NULL;
     *     vmcf->engine = NULL;
     *     vmcf->check_engine = NULL;
     *     vmcf->status_used = 0;
     */

    if (ngx_array_init(&vmcf->room_refs, cf->pool, 4,
                       sizeof(ngx_http_velvet_rope_room_ref_t *))
        != NGX_OK)
    {
        return NULL;
    }

    return vmcf;
}


static void *
ngx_http_velvet_rope_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_velvet_rope_loc_conf_t  *vlcf;

    vlcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_velvet_rope_loc_conf_t));
    if (vlcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     vlcf->room = { 0, NULL };   unset, inherited from the enclosing level
     *     vlcf->ref = NULL;
     *     vlcf->status = 0;
     */

    return vlcf;
}


static char *
ngx_http_velvet_rope_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_velvet_rope_loc_conf_t  *prev = parent;
    ngx_http_velvet_rope_loc_conf_t  *conf = child;

    if (conf->room.data != NULL) {
        return NGX_CONF_OK;
    }

    /* Unset here: a status location is off, others take the enclosing level's room with
     * its directive (or are off when no level names one). */
    if (conf->status || prev->room.data == NULL) {
        ngx_str_set(&conf->room, "");
        conf->ref = NULL;

    } else {
        conf->room = prev->room;
        conf->ref = prev->ref;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_velvet_rope_config(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_velvet_rope_main_conf_t  *vmcf = conf;

    size_t               size;
    ssize_t              n;
    ngx_fd_t             fd;
    ngx_str_t           *value;
    vr_result            rc;
    ngx_file_info_t      fi;
    ngx_pool_cleanup_t  *cln;

    if (vmcf->config_path.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;
    vmcf->config_path = value[1];

    /* Relative paths are relative to the nginx configuration prefix, like `include`. */
    if (ngx_conf_full_name(cf->cycle, &vmcf->config_path, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* Read the whole file now: the master reads it once per (re)load, workers never do. */
    fd = ngx_open_file(vmcf->config_path.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", &vmcf->config_path);
        return NGX_CONF_ERROR;
    }

    if (ngx_fd_info(fd, &fi) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_fd_info_n " \"%V\" failed", &vmcf->config_path);
        (void) ngx_close_file(fd);
        return NGX_CONF_ERROR;
    }

    size = (size_t) ngx_file_size(&fi);

    /* One spare byte so that an empty file still has a valid pointer. */
    vmcf->config_text.data = ngx_pnalloc(cf->pool, size + 1);
    if (vmcf->config_text.data == NULL) {
        (void) ngx_close_file(fd);
        return NGX_CONF_ERROR;
    }

    vmcf->config_text.len = 0;

    while (vmcf->config_text.len < size) {
        n = ngx_read_fd(fd, vmcf->config_text.data + vmcf->config_text.len,
                        size - vmcf->config_text.len);

        if (n == -1) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                               ngx_read_fd_n " \"%V\" failed", &vmcf->config_path);
            (void) ngx_close_file(fd);
            return NGX_CONF_ERROR;
        }

        if (n == 0) {
            break;   /* the file shrank while we read it: take what is there */
        }

        vmcf->config_text.len += n;
    }

    vmcf->config_text.data[vmcf->config_text.len] = '\0';

    if (ngx_close_file(fd) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_ALERT, cf, ngx_errno,
                           ngx_close_file_n " \"%V\" failed", &vmcf->config_path);
    }

    /* Frees the engines with this configuration, whatever way it ends (failed test,
     * reload, exit). Registered before any engine exists. */
    cln = ngx_pool_cleanup_add(cf->pool, 0);
    if (cln == NULL) {
        return NGX_CONF_ERROR;
    }

    cln->handler = ngx_http_velvet_rope_cleanup_engines;
    cln->data = vmcf;

    rc = vr_shared_region_size((const char *) vmcf->config_text.data,
                               vmcf->config_text.len, &vmcf->region_size);
    if (rc != VR_OK) {
        goto invalid;
    }

    /* A private engine validates the whole configuration now (so `nginx -t` reports it) and
     * answers which rooms exist when the `velvet_rope` directives are checked. */
    rc = vr_engine_new((const char *) vmcf->config_text.data, vmcf->config_text.len,
                       vr_now_ms(), &vmcf->check_engine);
    if (rc != VR_OK) {
        vmcf->check_engine = NULL;
        goto invalid;
    }

    /* Where the counters live is decided once the whole http block is read (a
     * velvet_rope_state directive may follow): see ngx_http_velvet_rope_add_counters. */
    return NGX_CONF_OK;

invalid:

    {
        char  msg[512];

        if (vr_last_error(msg, sizeof(msg)) == 0) {
            msg[0] = '\0';
        }

        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "velvet_rope_config \"%V\": %s: %s",
                           &vmcf->config_path, vr_result_name(rc), msg);
    }

    return NGX_CONF_ERROR;
}


static char *
ngx_http_velvet_rope_state(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_velvet_rope_main_conf_t  *vmcf = conf;

    ngx_str_t  *value;

    if (vmcf->state_path.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;
    vmcf->state_path = value[1];

    /* Relative to the configuration prefix, like `include`; NUL-terminated either way. */
    if (ngx_conf_full_name(cf->cycle, &vmcf->state_path, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * Where the counters live: a state file opened now, in the master (when velvet_rope_state is
 * given; not under `nginx -t`, which only checks), or a shared memory zone whose init
 * callback makes the engine once nginx has mapped it.
 */
static ngx_int_t
ngx_http_velvet_rope_add_counters(ngx_conf_t *cf, ngx_http_velvet_rope_main_conf_t *vmcf)
{
    size_t           size, pages;
    ngx_str_t        name;
    vr_result        rc;
    ngx_shm_zone_t  *running;

    if (vmcf->state_path.data != NULL) {
        if (ngx_test_config) {
            return NGX_OK;
        }

        rc = vr_engine_open_state_file((const char *) vmcf->config_text.data,
                                       vmcf->config_text.len,
                                       (const char *) vmcf->state_path.data, vr_now_ms(),
                                       &vmcf->engine);
        if (rc != VR_OK) {
            vmcf->engine = NULL;
            ngx_http_velvet_rope_log_error(NGX_LOG_EMERG, cf->log,
                                           "vr_engine_open_state_file()", rc);
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "velvet_rope: cannot use the state file \"%V\" (the running "
                          "configuration, if any, keeps serving)", &vmcf->state_path);
            return NGX_ERROR;
        }

        ngx_log_error(NGX_LOG_NOTICE, cf->log, 0,
                      "velvet_rope: counters in state file \"%V\"", &vmcf->state_path);
        return NGX_OK;
    }

    /*
     * The zone holds the region (with NGX_HTTP_VELVET_ROPE_REGION_ALIGN spare bytes to align
     * it) plus what nginx's slab allocator keeps in the zone: its pool header with the slot
     * and stats tables (less than a page), one ngx_slab_page_t descriptor per page, and up
     * to one page lost when the slab aligns its first page.
     */
    pages = ngx_align(vmcf->region_size + NGX_HTTP_VELVET_ROPE_REGION_ALIGN, ngx_pagesize)
            / ngx_pagesize;
    size = (pages + 2) * ngx_pagesize
           + ngx_align(pages * sizeof(ngx_slab_page_t), ngx_pagesize);

    ngx_str_set(&name, "velvet_rope");

    /* A reload whose configuration fits in the running zone (rooms reordered, removed or
     * made smaller) asks for that zone's size, so that nginx hands the same memory over and
     * every count is kept. */
    running = ngx_http_velvet_rope_running_zone(&name, NULL);
    if (running != NULL && running->shm.size >= size) {
        size = running->shm.size;
    }

    vmcf->shm_zone = ngx_shared_memory_add(cf, &name, size,
                                           &ngx_http_velvet_rope_module);
    if (vmcf->shm_zone == NULL) {
        return NGX_ERROR;
    }

    vmcf->shm_zone->init = ngx_http_velvet_rope_init_zone;
    vmcf->shm_zone->data = vmcf;

    return NGX_OK;
}


static char *
ngx_http_velvet_rope(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_velvet_rope_loc_conf_t  *vlcf = conf;

    ngx_str_t                         *value;
    ngx_http_velvet_rope_room_ref_t   *ref, **slot;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (vlcf->room.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") == 0) {
        ngx_str_set(&vlcf->room, "");
        return NGX_CONF_OK;
    }

    if (value[1].len == 0) {
        return "takes a room name or \"off\"";
    }

    vlcf->room = value[1];

    /* The room is checked against the engine configuration at postconfiguration, when
     * velvet_rope_config has certainly been read whatever the order of the directives. */
    vmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_velvet_rope_module);

    /* Allocated on its own (the array holds pointers): the locations keep pointing at it
     * while the array grows. */
    ref = ngx_pcalloc(cf->pool, sizeof(ngx_http_velvet_rope_room_ref_t));
    slot = ngx_array_push(&vmcf->room_refs);
    if (ref == NULL || slot == NULL) {
        return NGX_CONF_ERROR;
    }

    ref->file = cf->conf_file->file.name;
    ref->line = cf->conf_file->line;
    ref->room = value[1];
    *slot = ref;

    vlcf->ref = ref;

    return NGX_CONF_OK;
}


static char *
ngx_http_velvet_rope_status(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_velvet_rope_loc_conf_t  *vlcf = conf;

    ngx_http_core_loc_conf_t          *clcf;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    if (vlcf->status) {
        return "is duplicate";
    }

    vlcf->status = 1;

    vmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_velvet_rope_module);
    vmcf->status_used = 1;

    clcf = ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
    clcf->handler = ngx_http_velvet_rope_status_handler;

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_velvet_rope_postconfiguration(ngx_conf_t *cf)
{
    bool                               exists;
    uint8_t                            reads;
    uint32_t                           outcome;
    ngx_uint_t                         i;
    vr_result                          rc;
    ngx_http_handler_pt               *h;
    ngx_http_core_main_conf_t         *cmcf;
    ngx_http_velvet_rope_room_ref_t  **ref;
    ngx_http_velvet_rope_main_conf_t  *vmcf;

    vmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_velvet_rope_module);

    ref = vmcf->room_refs.elts;

    if ((vmcf->room_refs.nelts > 0 || vmcf->status_used)
        && vmcf->config_text.data == NULL)
    {
        ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                      "velvet_rope: \"velvet_rope\" or \"velvet_rope_status\" used "
                      "without \"velvet_rope_config\" in the http block");
        return NGX_ERROR;
    }

    for (i = 0; i < vmcf->room_refs.nelts; i++) {
        exists = false;
        rc = vr_engine_has_room(vmcf->check_engine, (const char *) ref[i]->room.data,
                                ref[i]->room.len, &exists);

        if (rc != VR_OK || !exists) {
            ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
                          "velvet_rope: unknown room \"%V\" in %V:%ui "
                          "(not among the rooms of \"%V\")",
                          &ref[i]->room, &ref[i]->file, ref[i]->line,
                          &vmcf->config_path);
            return NGX_ERROR;
        }

        /* Learnt once per configuration, so that a room without rules or header tickets
         * keeps the request path it always had (vr_engine_admit on the Cookie header). */
        reads = 0;
        rc = vr_engine_room_reads_request(vmcf->check_engine,
                                          (const char *) ref[i]->room.data,
                                          ref[i]->room.len, &reads);
        if (rc != VR_OK) {
            ngx_http_velvet_rope_log_error(NGX_LOG_EMERG, cf->log,
                                           "vr_engine_room_reads_request()", rc);
            return NGX_ERROR;
        }

        ref[i]->reads = reads;

        /* Whether the origin may revoke the room's sessions: a revocation with no ticket
         * changes nothing, and says "no session" in such a room, "not enabled" in any
         * other. */
        outcome = VR_REVOKE_NOT_ENABLED;
        rc = vr_engine_revoke_request(vmcf->check_engine, (const char *) ref[i]->room.data,
                                      ref[i]->room.len, NULL, 0, NULL, 0, NULL, 0,
                                      vr_now_ms(), &outcome);
        if (rc != VR_OK) {
            ngx_http_velvet_rope_log_error(NGX_LOG_EMERG, cf->log,
                                           "vr_engine_revoke_request()", rc);
            return NGX_ERROR;
        }

        ref[i]->revocable = (outcome != VR_REVOKE_NOT_ENABLED);
    }

    /* Its job is done; the serving engine is made over the state file or the zone. */
    if (vmcf->check_engine != NULL) {
        vr_engine_free(vmcf->check_engine);
        vmcf->check_engine = NULL;
    }

    if (vmcf->config_text.data == NULL) {
        /* Module loaded but unused in this http block: stay out of the request path. */
        return NGX_OK;
    }

    if (ngx_http_velvet_rope_add_counters(cf, vmcf) != NGX_OK) {
        return NGX_ERROR;
    }

    cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);

    h = ngx_array_push(&cmcf->phases[NGX_HTTP_PRECONTENT_PHASE].handlers);
    if (h == NULL) {
        return NGX_ERROR;
    }

    *h = ngx_http_velvet_rope_decide_handler;

    ngx_http_next_header_filter = ngx_http_top_header_filter;
    ngx_http_top_header_filter = ngx_http_velvet_rope_header_filter;

    ngx_http_next_body_filter = ngx_http_top_body_filter;
    ngx_http_top_body_filter = ngx_http_velvet_rope_body_filter;

    return NGX_OK;
}
