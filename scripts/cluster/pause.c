/* The pod sandbox's one process, as Kubernetes' own pause: it holds the pod's namespaces, sleeps and
   reaps the children that end up under it, and exits on SIGINT or SIGTERM. Built static, so the image
   holds this file alone. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void quit(int signal_number) { (void)signal_number; _exit(0); }

static void reap(int signal_number) {
    (void)signal_number;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction action = {0};
    action.sa_handler = quit;
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
    action.sa_handler = reap;
    action.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &action, NULL);
    for (;;) pause();
    return 0;
}
