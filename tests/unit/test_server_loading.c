/* test_server_loading.c: a server started before its model (srv_start with no backend,
 * as kinetic serve starts while it loads the weights) answers /health 503 "loading model"
 * and every other endpoint 503 model_loading; once srv_attach gives it the backend,
 * /health answers 200 and a completion runs. --cors: the header and a preflight. */
#include "check.h"
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* One request on a fresh connection (the server closes each); the whole answer in out. */
static int http(int port, const char *req, char *out, size_t cap)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t len = strlen(req), sent = 0;
    while (sent < len) {
        ssize_t k = write(fd, req + sent, len - sent);
        if (k <= 0)
            break;
        sent += (size_t)k;
    }
    size_t got = 0;
    for (;;) {
        ssize_t k = read(fd, out + got, cap - 1 - got);
        if (k <= 0)
            break;
        got += (size_t)k;
        if (got == cap - 1)
            break;
    }
    out[got] = '\0';
    close(fd);
    int status = 0;
    if (sscanf(out, "HTTP/1.1 %d", &status) != 1)
        status = -1;
    return status;
}

static const char completion[] =
    "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    "Content-Length: 42\r\n\r\n{\"prompt\": \"hello there\", \"max_tokens\": 3}";

int main(void)
{
    struct kn_err err = {0};
    struct srv_config cfg = {.port = 0, .cors = "https://app.example"};
    struct srv *s = NULL;
    CHECKF(srv_start(&s, &cfg, NULL, &err) == KN_OK, "%s", err.msg);
    if (!s)
        CHECK_DONE();
    int port = srv_port(s);
    static char out[65536];
    CHECK_EQ_INT(http(port, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n", out, sizeof out), 503);
    CHECKF(strstr(out, "{\"status\":\"loading model\"}") != NULL, "%s", out);
    CHECK(strstr(out, "Access-Control-Allow-Origin: https://app.example") != NULL);
    CHECK_EQ_INT(http(port, completion, out, sizeof out), 503);
    CHECKF(strstr(out, "\"code\":\"model_loading\"") != NULL, "%s", out);
    CHECK_EQ_INT(http(port, "GET /slots HTTP/1.1\r\nHost: t\r\n\r\n", out, sizeof out), 503);
    CHECK_EQ_INT(http(port, "GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n", out, sizeof out), 503);
    /* a CORS preflight names the route's method and the headers a client sends */
    CHECK_EQ_INT(http(port, "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                            "Origin: https://app.example\r\n"
                            "Access-Control-Request-Method: POST\r\n\r\n", out, sizeof out), 204);
    CHECK(strstr(out, "Access-Control-Allow-Methods: POST, OPTIONS") != NULL);
    CHECK(strstr(out, "Access-Control-Allow-Headers: Authorization, Content-Type") != NULL);

    struct srv_backend b;
    CHECKF(srv_toy_backend(&b, 2, 256, 0, &err) == KN_OK, "%s", err.msg);
    CHECKF(srv_attach(s, &b, &err) == KN_OK, "%s", err.msg);
    CHECK(srv_attach(s, &b, &err) != KN_OK); /* once */
    CHECK_EQ_INT(http(port, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n", out, sizeof out), 200);
    CHECKF(strstr(out, "\"status\":\"ok\"") != NULL, "%s", out);
    CHECK_EQ_INT(http(port, completion, out, sizeof out), 200);
    CHECKF(strstr(out, "\"text_completion\"") != NULL, "%s", out);
    CHECK_EQ_INT(http(port, "GET /slots HTTP/1.1\r\nHost: t\r\n\r\n", out, sizeof out), 200);
    CHECKF(strstr(out, "\"id\":0") && strstr(out, "\"id\":1") && strstr(out, "\"n_ctx\":256"), "%s", out);
    srv_stop(s);
    b.free(b.ctx);
    CHECK_DONE();
}
