// dashboard_picture URL TOKEN JOB OUT: signs in to the dashboard at URL (e.g.
// http://127.0.0.1:8080/dashboard/) with the admin TOKEN, opens job JOB's page once its curves
// and rounds are drawn, and writes a PNG of the whole page to OUT, 1280 pixels wide, through
// headless Chromium (tests/support/browser.h). `scripts/demo.sh --picture FILE` takes the
// README's picture of the demo job with it. Exits 1 with a message when a step fails.

#include <cstdio>
#include <exception>
#include <string>

#include "tests/support/browser.h"
#include "tests/support/temp_dir.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: dashboard_picture URL TOKEN JOB OUT.png\n");
    return 2;
  }
  const std::string url = argv[1], token = argv[2], job = argv[3], out = argv[4];
  try {
    fedcase::testing::TempDir dir;
    fedcase::testing::Browser browser(dir);
    browser.call("Emulation.setDeviceMetricsOverride",
                 {{"width", 1280}, {"height", 900}, {"deviceScaleFactor", 1}, {"mobile", false}});
    browser.navigate(url);
    auto step = [&](const std::string& what, const std::string& expression) {
      if (!browser.wait_for(expression, 60)) throw std::runtime_error(what + " did not happen");
    };
    step("the sign-in form", "document.getElementById('signin') && "
                             "!document.getElementById('signin').hidden");
    browser.evaluate("document.getElementById('token').value = " + nlohmann::json(token).dump() +
                     "; document.getElementById('signin-form').requestSubmit(); true");
    step("the job list", "document.querySelectorAll('#jobs-rows tr').length >= 1");
    browser.evaluate("location.hash = '#/jobs/" + job + "'; true");
    step("the job's curves", "Number(document.getElementById('chart-accuracy').dataset.points) >= 2");
    step("the job's rounds", "document.querySelectorAll('#rounds-rows tr').length >= 2");
    step("the job's models", "document.querySelectorAll('#models-rows tr').length >= 2");
    browser.screenshot(out);
    std::printf("dashboard_picture: job %s's page written to %s\n", job.c_str(), out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dashboard_picture: %s\n", e.what());
    return 1;
  }
}
