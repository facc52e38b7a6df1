/* The pod sandbox's one process: it holds the pod's namespaces, reaps the orphans that end up
 * as its children (it is PID 1 of a shared PID namespace), and exits on SIGINT or SIGTERM. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) { _exit(sig == SIGTERM ? 0 : 2); }

static void on_child(int sig) {
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0) {
	}
}

int main(void) {
	struct sigaction stop = {.sa_handler = on_stop};
	struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
	if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
	    sigaction(SIGCHLD, &child, NULL) < 0)
		return 1;
	for (;;)
		pause();
}
