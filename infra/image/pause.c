/* The pod sandbox's pause process for Eddy's local images: holds the pod's namespaces, reaps
 * any child it inherits (it is PID 1 of the pod when the PID namespace is shared) and exits 0
 * on SIGTERM or SIGINT. Built static (no libc in the image) by infra/image/image.sh. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) { (void)sig; stop = 1; }

static void on_child(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("eddy pause 1");
        return 0;
    }
    if (getpid() != 1) fputs("pause: warning: not PID 1\n", stderr);

    struct sigaction stop_action = {.sa_handler = on_stop};
    sigemptyset(&stop_action.sa_mask);
    struct sigaction child_action = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
    sigemptyset(&child_action.sa_mask);
    if (sigaction(SIGTERM, &stop_action, NULL) < 0 || sigaction(SIGINT, &stop_action, NULL) < 0 ||
        sigaction(SIGCHLD, &child_action, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }

    /* The signals stay blocked except inside sigsuspend, so none can slip in between the test
     * of `stop` and the wait. */
    sigset_t blocked, waiting;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGCHLD);
    sigprocmask(SIG_BLOCK, &blocked, &waiting);
    sigdelset(&waiting, SIGTERM);
    sigdelset(&waiting, SIGINT);
    sigdelset(&waiting, SIGCHLD);
    while (!stop) sigsuspend(&waiting);
    return 0;
}
